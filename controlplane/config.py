"""Settings, read once from the environment (`MOECTL_*`) at the entry point and passed down."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from controlplane.kube_kinds import KINDS

DAY = 86400.0
# every command (`up`, `serve`, `token`, `reconcile`, `migrate`, `prune`) reaches this one database by default
DEFAULT_DATABASE_URL = "sqlite:///.moectl/moectl.db"

class KubeScaleTarget(BaseModel):
    """Where a pool runs on Kubernetes: an object with a scale subresource, one of controlplane/kube_kinds.py
    (Deployment, StatefulSet, LeaderWorkerSet, Grove's PodCliqueScalingGroup, Dynamo's and RoleBasedGroup's scaling
    adapters: apiVersion and resource known) or another custom resource (both given). JSON as the Helm chart
    writes it: {"deployment", "role", "namespace", "apiVersion", "kind", "resource", "name", "podsPerReplica"}."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    deployment: str = Field(description="the moectl deployment the pool belongs to")
    role: str = Field(pattern="^(prefill|decode|unified)$")
    namespace: str = Field(default="", description="empty: the controller's own (MOECTL_POD_NAMESPACE)")
    api_version: str = Field(alias="apiVersion", pattern="^[a-z0-9.-]+/[a-z0-9]+$",
                             description="group/version; empty: the known kind's; the core group has no scalable "
                                         "pools")
    kind: str = Field(min_length=1, description="a kind of controlplane/kube_kinds.py, or the custom resource's")
    resource: str = Field(default="", description="the plural resource name; empty: the known kind's")
    name: str = Field(min_length=1)
    pods_per_replica: int = Field(default=1, ge=1, alias="podsPerReplica",
                                  description="pods in one replica of the scale where the object does not say "
                                              "(a Grove or Dynamo multi-node unit, an RBG role instance); a "
                                              "LeaderWorkerSet's is its leaderWorkerTemplate.size")

    @model_validator(mode="before")
    @classmethod
    def _known_kind(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        known = KINDS.get(data.get("kind", ""))
        api_version = data.get("apiVersion") or data.get("api_version") or (known.api_version if known else "")
        if not api_version:
            raise ValueError(f"scale target {data.get('name')!r}: kind {data.get('kind')} needs its `apiVersion`")
        resource = data.get("resource") or (known.resource if known and known.api_version.split("/")[0]
                                            == api_version.split("/")[0] else "")
        if not resource:
            raise ValueError(f"scale target {data.get('name')!r}: kind {data.get('kind')} needs its plural "
                             f"`resource`")
        return {k: v for k, v in data.items() if k != "api_version"} | {"apiVersion": api_version,
                                                                         "resource": resource}

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/")[1]


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
    agent_gone_seconds: float = Field(default=300.0, gt=0,
                                      description="an agent silent this long is gone: it leaves the quorum and "
                                                  "the counts (a replaced pod, a renamed instance)")
    max_snapshot_age_seconds: float = Field(default=300.0, gt=0, description="older windows are refused")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    history_windows: int = Field(default=120, ge=1, description="windows kept per pool for planning and views")
    replica_startup_seconds: float = Field(default=120.0, gt=0, description="how long a new pool instance takes "
                                                                            "to serve (the pool planner's horizon)")
    plan_in_worker: bool = Field(default=True, description="solve placements in a worker process, so a large "
                                                           "solve never holds up the API's ingest")
    # retention: what `controlplane/loop/prune.py` deletes, never what is in force (see there)
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
    # leader election (controlplane/leader/) and the Kubernetes pool actuator (controlplane/actuate/kube.py)
    leader_election: bool = Field(default=True, description="elect one writer among the replicas sharing the "
                                                            "database; false: this process is the only one")
    lease_name: str = Field(default="", description="elect through this coordination.k8s.io Lease; empty: "
                                                    "through the database's leaders table")
    lease_namespace: str = Field(default="", description="the Lease's namespace; empty: pod_namespace")
    leader_identity: str = Field(default="", description="this replica in the election; empty: pod_name (or "
                                                         "the host name) and a random suffix")
    leader_lease_seconds: float = Field(default=15.0, gt=0, description="a leader not renewing for this long "
                                                                        "is replaced")
    leader_renew_seconds: float = Field(default=10.0, gt=0, description="a leader stops writing when it could not "
                                                                        "renew for this long (< lease)")
    leader_retry_seconds: float = Field(default=2.0, gt=0, description="time between renewals and attempts")
    pod_name: str = Field(default="", description="this pod (the chart sets it from the downward API)")
    pod_namespace: str = Field(default="", description="this pod's namespace")
    kubeconfig: str = Field(default="", description="a kubeconfig file; empty: the pod's service account")
    kube_scale_targets: list[KubeScaleTarget] = Field(default_factory=list,
                                                      description="JSON: the pools moectl sizes on Kubernetes")
    kube_field_manager: str = Field(default="moectl", description="who moectl is in managedFields")

    @property
    def stale_after_seconds(self) -> float:
        return self.stale_after_windows * self.window_seconds

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if not self.leader_retry_seconds < self.leader_renew_seconds < self.leader_lease_seconds:
            raise ValueError("leader election needs leader_retry_seconds < leader_renew_seconds < "
                             "leader_lease_seconds")
        pools = [(t.deployment, t.role) for t in self.kube_scale_targets]
        twice = {f"{d}/{r}" for d, r in pools if pools.count((d, r)) > 1}
        if twice:
            raise ValueError(f"kube_scale_targets: pool(s) {sorted(twice)} have more than one target")
        if self.agent_gone_seconds < self.stale_after_seconds:
            raise ValueError(f"agent_gone_seconds {self.agent_gone_seconds:g} is shorter than the stale limit "
                             f"(stale_after_windows x window_seconds = {self.stale_after_seconds:g}s)")
        if self.retain_agents_seconds < self.agent_gone_seconds:
            raise ValueError(f"retain_agents_seconds {self.retain_agents_seconds:g} is shorter than "
                             f"agent_gone_seconds {self.agent_gone_seconds:g}: agents would vanish before they are "
                             f"counted gone")
        return self
