"""Settings, read once from the environment (`MOECTL_*`) at the entry point and passed down."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DAY = 86400.0
# every command (`up`, `serve`, `token`, `reconcile`, `migrate`, `prune`) reaches this one database by default
DEFAULT_DATABASE_URL = "sqlite:///.moectl/moectl.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MOECTL_", frozen=True)

    database_url: str = Field(default=DEFAULT_DATABASE_URL,
                              description="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://...; the "
                                          "default is relative to the working directory")
    host: str = "127.0.0.1"
    port: int = 8600
    api_token: str = Field(default="", description="bootstrap admin token; empty: generated at start")
    agent_token: str = Field(default="", description="bootstrap agent token (post snapshots only)")
    alerts_token: str = Field(default="", description="bootstrap token for the Alertmanager webhook")
    anonymous_read: bool = Field(default=True, description="let anyone read overviews (false: viewer token)")
    alert_deployment_label: str = Field(default="deployment", description="alert label naming the deployment")
    window_seconds: float = Field(default=5.0, gt=0, description="the window agents aggregate over")
    reconcile_seconds: float = Field(default=5.0, gt=0, description="time between reconcile passes")
    warmup_windows: int = Field(default=1, ge=0, description="a new agent's first windows are not aggregated")
    stale_after_windows: float = Field(default=3.0, gt=0, description="an agent silent this long is stale")
    agent_gone_seconds: float = Field(default=300.0, gt=0,
                                      description="an agent silent this long is gone: it leaves the quorum and "
                                                  "the counts (a replaced pod, a renamed instance)")
    max_snapshot_age_seconds: float = Field(default=300.0, gt=0, description="older windows are refused")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    history_windows: int = Field(default=120, ge=1, description="windows kept per pool for planning and views")
    # retention: what `controlplane/prune.py` deletes, never what is in force (see there)
    retain_actions_seconds: float = Field(default=30 * DAY, gt=0,
                                          description="settled actions (the audit trail) older than this")
    retain_versions_seconds: float = Field(default=DAY, gt=0,
                                           description="placement and routing versions replaced this long ago")
    retain_requests_seconds: float = Field(default=DAY, gt=0, description="handled requests older than this")
    retain_alert_events_seconds: float = Field(default=7 * DAY, gt=0,
                                               description="alert notifications received this long ago")
    retain_agents_seconds: float = Field(default=DAY, gt=0, description="gone agents silent this long")
    retain_audit_seconds: float = Field(default=365 * DAY, gt=0, description="admin audit events older than this")
    prune_seconds: float = Field(default=60.0, gt=0, description="the loop prunes at most this often")
    max_prune_rows: int = Field(default=5000, ge=1, description="rows of each kind one loop prune deletes at most")
    otlp_endpoint: str = Field(default="", description="OTLP/HTTP traces endpoint; empty: no export")

    @property
    def stale_after_seconds(self) -> float:
        return self.stale_after_windows * self.window_seconds

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.agent_gone_seconds < self.stale_after_seconds:
            raise ValueError(f"agent_gone_seconds {self.agent_gone_seconds:g} is shorter than the stale limit "
                             f"(stale_after_windows x window_seconds = {self.stale_after_seconds:g}s)")
        if self.retain_agents_seconds < self.agent_gone_seconds:
            raise ValueError(f"retain_agents_seconds {self.retain_agents_seconds:g} is shorter than "
                             f"agent_gone_seconds {self.agent_gone_seconds:g}: agents would vanish before they are "
                             f"counted gone")
        return self
