"""Response bodies of a deployment's overview (GET /v1/deployments/{name}/overview): its pools, their windows and
the pool planner's plan. Field names are a contract: extend, don't rename."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.protocol import ModelShape
from controlplane.api.schemas import ActionOut, AgentsHealth


class Queue(BaseModel):
    running: int
    waiting: int


class Latency(BaseModel):
    mean: float | None
    p99: float | None


class WindowPoint(BaseModel):
    index: int
    start: float
    placement_version: int
    imbalance: float | None
    all2all_share: float | None
    prefix_hit_ratio: float | None
    mtp_acceptance: float | None
    tokens: int
    routing_recall: float | None = Field(default=None, description="share of the experts the model's own routing "
                                                                   "picks that the limited router kept")
    groups_per_token: float | None = Field(default=None, description="mean distinct expert groups a token's "
                                                                     "top-k reached; null: not measured")
    nodes_per_token: float | None = Field(default=None, description="mean distinct nodes, likewise")
    step_imbalance: dict[str, float] | None = Field(
        default=None, description="busiest GPU over mean per MoE step (token-weighted over steps and layers) with the "
                                  "dispatch-time split ('split'), the fixed shares ('shares'), the per-step LP bound "
                                  "('bound'), and the share of load routed by the split ('routed'); null: not measured")


class ParkedOut(BaseModel):
    knob: str
    since: float
    action_id: int | None = Field(description="the action whose reverted change parked it")
    reason: str = Field(description="the evidence: what was predicted and what was measured")


class DiagnosisOut(BaseModel):
    cause: str = Field(description="regression, skew, routing or not_load_related")
    reason: str
    evidence: dict


class RoutingReachOut(BaseModel):
    """Whether the group limit in force is honoured, judged as the loop judges it (plan/routing_reach.py)."""

    topk_group: int | None = Field(description="groups per token in force: issued, else the model's own; null: none")
    groups_per_token_mean: float | None = Field(default=None, description="last measured window; null: none")
    groups_per_token_max: int | None = None
    nodes_per_token_mean: float | None = None
    nodes_per_token_max: int | None = None
    over_limit_share: float | None = Field(default=None, description="share of that window's tokens past topk_group")
    is_violated: bool = Field(description="configured but not honoured for the policy's sustained windows")
    reason: str


class ChangeCostOut(BaseModel):
    """What one placement change costs the pool, as the loop prices it (controlplane/plan/change_cost.py)."""

    seconds: float = Field(description="seconds of the pool's whole capacity one change takes")
    source: str = Field(description="'measured: ...' on this deployment, or 'prior: ...' the engine's published figure")
    num_measured: int = Field(default=0, description="timed acts the measure holds (0: the prior)")
    last_seconds: float | None = Field(default=None, description="the newest measured seconds per act")


class PricedChangeOut(BaseModel):
    """A placement change's price against what it realised (controlplane/plan/placement_price.py)."""

    action_id: int
    at: float
    status: str
    predicted: dict = Field(description="its price: gain_share, horizon_seconds, gain_seconds, cost_seconds, "
                                        "cost_source, margin")
    realised: dict | None = Field(default=None, description="once verified: the gain_share and gain_seconds the "
                                                            "measured imbalance gives under the same step model")


class PoolOverview(BaseModel):
    role: str
    ep_size: int
    slots_per_rank: int
    placement_version: int = Field(description="the version the controller last issued")
    applied_placement_version: int | None = Field(description="the version every fresh agent runs; null if mixed")
    topk_group: int | None = Field(description="the routing limit issued to the pool's agents; null: none, they "
                                                "route with the model's own")
    expert_capacity_factor: float | None = Field(
        default=None, description="the per-expert cap issued to the pool's agents, as a multiple of an expert's even "
                                  "share of a step's tokens; null: no cap")
    dropped_share: float | None = Field(default=None, description="share of the last window's token-expert "
                                                                  "assignments the cap dropped")
    imbalance: float | None
    imbalance_floor: float | None = Field(default=None, description="the imbalance no placement of the pool's "
                                          "slots gets under on the last window's expert load; above the policy's "
                                          "threshold the pool's shape, not the loop, is the limit")
    agents: AgentsHealth
    history: list[WindowPoint]
    parked: list[ParkedOut] = Field(default=[], description="knobs the loop leaves alone after a reverted change, "
                                                            "until the model, the policy or the load changes")
    mtp_diagnosis: DiagnosisOut | None = Field(default=None, description="why MTP acceptance is under the policy's "
                                                                         "floor; null while it is not")
    routing_reach: RoutingReachOut | None = None
    change_cost: ChangeCostOut | None = Field(default=None, description="what a placement change costs the pool")
    priced_changes: list[PricedChangeOut] = Field(
        default=[], description="the pool's last priced placement changes, newest first: predicted vs realised")


class PoolDecisionOut(BaseModel):
    kind: str = Field(description="predictive, reactive, consolidate, budget, hold or keep")
    current: int = Field(description="replicas when decided: ready + starting")
    target: int
    reason: str
    predicted: dict = Field(description="the binding SLO at the target size: slo, seconds, target_seconds, replicas")


class PoolSizing(BaseModel):
    role: str
    replicas: int | None = Field(description="the size moectl set last; null: never sized by moectl")
    ready: int
    starting: int = Field(description="asked for, not serving yet")
    draining: int = Field(description="leaving: finishing their requests, taking no new ones")
    unschedulable: int = Field(default=0, description="asked for, but the cluster cannot place them (full): not "
                                                      "starting, and the pool may not grow while any are")
    min: int
    max: int
    gpus_per_replica: int
    decision: PoolDecisionOut


class LoadOut(BaseModel):
    request_rate: float = Field(description="requests/s")
    method: str = Field(description="measured, or the forecaster chosen by backtest (+ surge x its error)")
    horizon_seconds: float
    is_backtested: bool
    prompt_tokens: float
    output_tokens: float
    remote_share: float = Field(description="share of requests prefilled on the prefill pool")
    prefill_sized_by: str | None = Field(default=None, description="the model the prefill pool was sized with: "
                                         "'prompt-length mix' (the routers' buckets) or 'mean prompt' (0.7 "
                                         "utilisation ceiling); null in plans stored before 2026-12-01")
    at: float | None = Field(default=None, description="when this forecast was made")


class ThresholdOut(BaseModel):
    tokens: int | None = Field(description="the PD-aware local-prefill threshold in force; null: unknown yet")
    decision: dict | None = Field(description="the planner's last step of it: current, target, reason")


class PoolPlanOut(BaseModel):
    """The pool planner's latest plan (controlplane/loop/reconcile_pools.py), each pass."""

    at: float
    slo: dict[str, float] = Field(description="target name (ttft_p90, itl_p99, ...) -> seconds")
    gpu_budget: int | None
    pools: list[PoolSizing]
    load: LoadOut | None = Field(description="what the pools are sized for now")
    forecast: LoadOut | None = Field(description="the last predictive step's forecast")
    threshold: ThresholdOut
    measured: dict = Field(description="the last window, from the routers: request_rate, ttft_p90, ttft_p99, "
                                       "itl_p90, itl_p99, local_prefill_share, mean input/output tokens")


class PoolPoint(BaseModel):
    """One window of the deployment as the routers and the instances measured it."""

    end: float
    request_rate: float | None
    ttft_p90: float | None
    itl_p90: float | None
    replicas: dict[str, int] = Field(description="role -> instances that reported the window")


class Overview(BaseModel):
    deployment: str
    model: ModelShape
    engine: str = Field(default="bundled", description="bundled, sglang or vllm; added 2026-12")
    engine_applies: str = Field(default="", description="how the engine applies a placement change; added 2026-12")
    mode: str
    policy_version: int
    imbalance: float | None = Field(description="max/mean GPU load, mean over MoE layers, worst pool, last window")
    all2all_share: float | None = Field(description="all-to-all seconds / forward seconds, last window")
    prefix_hit_ratio: float | None
    mtp_acceptance: float | None
    mtp_acceptance_by_position: list[float] = Field(
        default=[], description="accepted / drafts at draft position 0, 1, ...: the MTP module's depth-wise view")
    queue: Queue
    ttft_seconds: Latency
    itl_seconds: Latency
    placement_version: dict[str, int | None] = Field(description="role -> applied placement version")
    agents: AgentsHealth
    pools: list[PoolOverview]
    last_actions: list[ActionOut]
    updated_at: float
    pool_plan: PoolPlanOut | None = Field(default=None, description="replicas per pool, SLO, forecast and the "
                                                                    "pool planner's decisions; null: not planned")
    pool_history: list[PoolPoint] = Field(default=[], description="the deployment's serving windows, oldest first")
