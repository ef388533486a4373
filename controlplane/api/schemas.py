"""Request and response bodies of the read and policy API (a deployment's overview: overview_schemas.py). Field
names are a contract: extend, don't rename."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.protocol import ModelShape
from controlplane.desired import Policy
from controlplane.plan.engines import EngineName


class DeploymentIn(BaseModel):
    model: ModelShape
    policy: Policy = Field(default_factory=Policy)
    engine: EngineName = Field(default="bundled", description="the engine it runs: bundled (moectl's runtime), "
                                                              "sglang or vllm (agents/adapters/); added 2026-12")


class AgentsHealth(BaseModel):
    total: int = Field(description="agents in the quorum: fresh + stale")
    fresh: int = Field(description="reported within the stale limit (stale_after_windows windows)")
    stale: int = Field(description="silent past the stale limit, not yet gone: counted against the quorum")
    gone: int = Field(default=0, description="silent past agent_gone_seconds: out of the quorum and the total; "
                                             "deleted by the pruning job after retain_agents_seconds")
    unhealthy: list[str] = Field(default_factory=list, description="added 2026-12-06: fresh instances whose engine "
                                 "adapter reported failures in its last window, each '<instance>: <cause> xN, ...' "
                                 "(agents/adapters/faults.py; docs/reference/reliability.md)")


class ActionOut(BaseModel):
    id: int
    role: str | None
    kind: str
    trigger: str
    mode: str
    status: str
    reason: str
    inputs: dict
    predicted: dict
    measured: dict
    placement_version: int | None
    alerts: list[dict] = []
    created_by: str
    created_at: float
    updated_at: float


class DeploymentSummary(BaseModel):
    name: str
    model: ModelShape
    mode: str
    imbalance: float | None
    agents: AgentsHealth


class PolicyOut(BaseModel):
    version: int
    policy: Policy
    created_by: str
    created_at: float
    note: str = ""


class RevertIn(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)


class RebalanceIn(BaseModel):
    role: str | None = Field(default=None, description="the pool; default: every pool of the deployment")
    dry_run: bool = False


class RebalanceOut(BaseModel):
    role: str
    decision: str
    reason: str
    predicted: dict | None
    action: ActionOut | None


class PoolSizeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=0, le=100_000, description="instances the pool should run")
    dry_run: bool = Field(default=False, description="check against the policy and record nothing")
    note: str = Field(default="", max_length=500, description="why, for the audit trail")


class PoolSizeOut(BaseModel):
    role: str
    replicas: int = Field(description="the size asked for")
    current: int | None = Field(description="the size moectl set last; null: never sized by moectl")
    decision: str = Field(description="resize (an action made or joined), keep, refused, or pending (recorded "
                                      "for the leader)")
    reason: str
    request_id: int | None
    action: ActionOut | None


class PoolSizeView(BaseModel):
    role: str
    replicas: int | None = Field(description="the size moectl set last; null: never sized by moectl")
    version: int
    action_id: int | None = Field(description="the action that set it")
    standing_down: ActionOut | None = Field(description="the conflict that keeps moectl off the pool's size")


TOKEN_NAME_PATTERN = r"^[A-Za-z0-9_.@-]+$"


class TokenIn(BaseModel):
    name: str = Field(min_length=1, max_length=128, pattern=TOKEN_NAME_PATTERN,
                      description="recorded as the author of what the token changes; 'loop', 'anonymous' and "
                                  "'bootstrap-*' are reserved")
    role: str


class TokenOut(BaseModel):
    name: str
    role: str
    prefix: str
    created_by: str
    created_at: float
    revoked_at: float | None


class PoolLoad(BaseModel):
    """One pool's latest complete window as matrices, for heatmaps and placement views (JSON lists:
    58 x 256 numbers is small for a browser; agents use the compact wire format instead)."""

    role: str
    ep_size: int
    slots_per_rank: int
    gpus_per_node: int
    window_index: int | None
    window_start: float | None
    window_placement_version: int | None = Field(description="the placement the window's GPU load ran under")
    placement_version: int
    expert_tokens: list[list[float]] = Field(description="[num_layers][num_experts] tokens, last window")
    gpu_tokens: list[list[float]] = Field(description="[num_layers][ep_size] tokens each GPU processed")
    slot_to_expert: list[list[int]] = Field(description="[num_layers][num_slots] the issued placement")
    previous_slot_to_expert: list[list[int]] | None = Field(description="the placement before it, if any")
