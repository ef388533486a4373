"""Settings, read once from the environment (`MOECTL_*`) at the entry point and passed down."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MOECTL_", frozen=True)

    database_url: str = Field(default="sqlite:///moectl.db",
                              description="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://...")
    host: str = "127.0.0.1"
    port: int = 8600
    api_token: str = Field(default="", description="bootstrap admin token; empty: generated at start")
    agent_token: str = Field(default="", description="bootstrap agent token (post snapshots only)")
    alerts_token: str = Field(default="", description="bootstrap token for the Alertmanager webhook")
    anonymous_read: bool = Field(default=True, description="let anyone read overviews (false: viewer token)")
    alert_deployment_label: str = Field(default="deployment", description="alert label naming the deployment")
    window_seconds: float = Field(default=5.0, gt=0, le=3600, description="the window agents aggregate over")
    reconcile_seconds: float = Field(default=5.0, gt=0, description="time between reconcile passes")
    max_reconcile_backoff_seconds: float = Field(
        default=30.0, gt=0, description="failed passes are retried after a wait that doubles up to this")
    max_loop_delay_intervals: float = Field(
        default=6.0, gt=0, description="/healthz fails when a reconcile pass is this many intervals overdue")
    db_timeout_seconds: float = Field(
        default=2.0, gt=0, le=60, description="a request waits this long for a database lock or connection, "
                                              "then is answered 503 + Retry-After (keep under the agents' 5 s)")
    warmup_windows: int = Field(default=1, ge=0, description="a new agent's first windows are not aggregated")
    stale_after_windows: float = Field(default=3.0, gt=0, description="an agent silent this long is stale")
    max_snapshot_age_seconds: float = Field(default=300.0, gt=0, description="older windows are refused")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    history_windows: int = Field(default=120, ge=1, description="windows kept per pool for planning and views")
    otlp_endpoint: str = Field(default="", description="OTLP/HTTP traces endpoint; empty: no export")
