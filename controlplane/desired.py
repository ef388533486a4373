"""What should be: the operator's policy and the plans the loop derives from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_REPLICAS = 100_000  # instances of one pool


@dataclass(frozen=True)
class Effect:
    """direction: -1 the signal should fall, +1 rise. tolerance: the signal's noise, in its own units.
    floors: signal -> the lowest value allowed after the change. context: other signals before the change
    (evidence for a later diagnosis, e.g. MTP acceptance before it)."""

    signal: str
    direction: int
    before: float
    predicted: float
    tolerance: float = 0.0
    floors: dict[str, float] = field(default_factory=dict)
    context: dict[str, float] = field(default_factory=dict)

    @property
    def predicted_move(self) -> float:
        """How far the signal should move the intended way (positive)."""
        return self.direction * (self.predicted - self.before)

    def to_json(self) -> dict:
        return {"signal": self.signal, "direction": self.direction, "before": round(self.before, 4),
                "predicted": round(self.predicted, 4), "tolerance": self.tolerance, "floors": dict(self.floors),
                "context": {k: round(v, 4) for k, v in self.context.items()}}

    @classmethod
    def from_json(cls, value: dict | None) -> Effect | None:
        """None for an action that recorded no intended effect (a bound enforced, a person's table)."""
        if not value:
            return None
        return cls(value["signal"], int(value["direction"]), float(value["before"]), float(value["predicted"]),
                   float(value.get("tolerance", 0.0)), dict(value.get("floors", {})), dict(value.get("context", {})))


class Mode(StrEnum):
    off = "off"  # the loop ignores the deployment
    observe = "observe"  # plans are recorded, nothing is applied
    approve = "approve"  # plans wait for a person
    auto = "auto"  # plans are applied


class KnobKind(StrEnum):
    """What a change moves: its actions' kind, its requests' and parks' knob (store/knobs.py holds each
    knob's versions and how its proposal waits)."""

    placement = "placement"  # slot -> expert tables, per pool
    routing = "routing"  # the group limit `topk_group`, per pool
    pool_size = "pool_size"  # instances of a pool
    local_prefill_threshold = "local_prefill_threshold"  # PD-aware local prefill (tokens), on the decode pool
    expert_capacity = "expert_capacity"  # per-expert capacity factor, per pool (controlplane/plan/capacity_factor.py)


class ReplicaBounds(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    min: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max: int = Field(default=8, ge=0, le=MAX_REPLICAS)

    @model_validator(mode="after")
    def _check(self) -> ReplicaBounds:
        if self.min > self.max:
            raise ValueError(f"min {self.min} exceeds max {self.max}")
        return self


class LatencySlo(BaseModel):
    """Latency targets the pool planner sizes the prefill and decode pools for, in seconds. TTFT counts
    from arrival (queue time included) to the first token; ITL is the time between two output tokens.
    At least one target; where both percentiles of a metric are set, p99 must not be under p90."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_p90_seconds: float | None = Field(default=None, gt=0, le=600, description="p90 time to first token")
    ttft_p99_seconds: float | None = Field(default=None, gt=0, le=600, description="p99 time to first token")
    itl_p90_seconds: float | None = Field(default=None, gt=0, le=10, description="p90 inter-token latency")
    itl_p99_seconds: float | None = Field(default=None, gt=0, le=10, description="p99 inter-token latency")

    @model_validator(mode="after")
    def _check(self) -> LatencySlo:
        values = self.model_dump()
        if all(v is None for v in values.values()):
            raise ValueError("slo needs at least one target (ttft_p90_seconds, ttft_p99_seconds, itl_p90_seconds "
                             "or itl_p99_seconds)")
        for metric in ("ttft", "itl"):
            p90, p99 = values[f"{metric}_p90_seconds"], values[f"{metric}_p99_seconds"]
            if p90 is not None and p99 is not None and p99 < p90:
                raise ValueError(f"{metric}_p99_seconds {p99} is under {metric}_p90_seconds {p90}")
        return self


class Policy(BaseModel):
    """Per-deployment policy; defaults are what a new deployment gets. Ratios are in 0..1.

    Every number is finite and bounded (JSON lets a client send `Infinity`, `NaN` or 10^400, which stored
    would break the loop and the webhook later): the bounds are far past any real setting.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    mode: Mode = Mode.observe
    # triggers
    imbalance_threshold: float = Field(default=1.15, ge=1.0, le=100,
                                       description="rebalance when max/mean GPU load stays above this")
    sustained_windows: int = Field(default=2, ge=1, le=100, description="...for this many complete windows")
    all2all_share_target: float | None = Field(default=0.3, gt=0, le=1,
                                               description="all-to-all share of step time to stay under")
    mtp_acceptance_floor: float | None = Field(default=None, gt=0, le=1,
                                               description="below it for the sustained windows: diagnose why "
                                                           "(load skew: rebalance; routing recall; a recent "
                                                           "change: roll it back; else recorded as not load "
                                                           "related); no change may push acceptance under it")
    prefix_hit_floor: float | None = Field(default=None, gt=0, le=1, description="prefix hit ratio floor")
    routing_recall_floor: float = Field(default=0.9, gt=0, le=1,
                                        description="never limit routing below this share of the experts the "
                                                    "model's own routing (its topk_group) picks; before "
                                                    "2026-12 it was a share of the unconstrained top-k")
    min_gain: float = Field(default=0.05, ge=0, le=100, description="minimum predicted drop in max/mean load")
    mtp_guard_tolerance: float = Field(
        default=0.05, ge=0, le=1,
        description="a placement change under which MTP acceptance falls by more than this share of its value "
                    "before is rolled back and the placement parked (controlplane/plan/change_guard.py)")
    latency_guard_tolerance: float = Field(
        default=1.0, ge=0, le=100,
        description="the same for the mean TTFT or ITL rising by more than this share (latency moves with the "
                    "load and the switch itself: a doubling by default; at 0.25 real workers rolled back a change "
                    "that cut the imbalance 1.38 -> 1.10 for ITL 0.059 -> 0.085 s)")
    change_price_margin: float = Field(
        default=1.25, ge=0, le=100,
        description="a placement change is made only when the pool's capacity it gains over the time its gain "
                    "holds is at least this many times what one change costs (controlplane/plan/placement_price.py)")
    min_gain_per_moved_slot: float | None = Field(
        default=None, ge=0, le=1,
        description="each moved expert residency (one weight copy) must lower its layer's max GPU load by at "
                    "least this share of the layer's mean; unset: the solver's own bar. Raised, a tight moves "
                    "budget buys only the moves that cut the hot GPUs (controlplane/plan/placement.py)")
    # bounds
    group_locality: bool = Field(default=False, description="keep each expert group's replicas on one node "
                                                            "(bounds cross-node traffic under group-limited routing)")
    max_moved_slots_fraction: float = Field(default=0.25, gt=0, le=1,
                                            description="share of all (layer, slot) residencies one change may move")
    max_moved_slots_per_hour_fraction: float = Field(default=2.0, gt=0, le=10_000,
                                                     description="moved residencies per hour, as a share of all")
    topk_group_min: int | None = Field(default=None, ge=1, le=4096,
                                       description="routing limit range, groups per token")
    topk_group_max: int | None = Field(default=None, ge=1, le=4096)
    max_dropped_share: float | None = Field(
        default=None, gt=0, le=0.5,
        description="manage the per-expert capacity factor: cap each expert's tokens per step when the placement "
                    "cannot bring max/mean GPU load under imbalance_threshold, never dropping more than this share "
                    "of the token-expert assignments; unset: no cap is issued")
    expert_capacity_factor_min: float = Field(default=1.25, ge=1.0, le=1000,
                                              description="the tightest cap, as a multiple of an expert's even share")
    expert_capacity_factor_max: float = Field(default=4.0, ge=1.0, le=1000,
                                              description="the loosest cap issued; past it the cap is lifted")
    replicas: dict[str, ReplicaBounds] = Field(default_factory=dict,
                                               description="pool role -> instance count bounds")
    gpu_budget: int | None = Field(default=None, ge=1, le=MAX_REPLICAS * 3,
                                   description="GPUs all pools together may use")
    local_prefill_threshold: int | None = Field(default=None, ge=0, le=1_000_000,
                                                description="PD-aware: prompts up to this many tokens prefill on "
                                                            "the decode instance; unset: the router's default")
    slo: LatencySlo | None = Field(default=None, description="latency targets the pool planner sizes the prefill "
                                                             "and decode pools for; unset: pool sizes are not planned")
    pool_cooldown_seconds: float = Field(default=300.0, ge=0, le=86_400,
                                         description="a pool never changes direction within this of its last change")
    pool_predictive_interval_seconds: float = Field(default=180.0, ge=10, le=86_400,
                                                    description="how often pools are sized from the load forecast "
                                                                "(a breached target is acted on every window)")
    pool_size_prefill_by_mix: bool = Field(default=True,
                                           description="size the prefill pool from a queue of the routers' "
                                                       "prompt-length mix; false: from the mean prompt under a "
                                                       "0.7 utilisation ceiling (controlplane/solve/pools/rules.py)")
    # timing and safety
    cooldown_seconds: float = Field(default=30.0, ge=0, le=365 * 86400,
                                    description="minimum time between changes of a knob (at most a year)")
    flap_window_seconds: float = Field(default=600.0, ge=0, le=365 * 86400,
                                       description="a knob's direction (tighter/looser routing) is never reversed "
                                                   "within this long of the change it would reverse")
    max_actions_per_hour: int = Field(default=60, ge=1, le=3600)
    min_fresh_agents_fraction: float = Field(default=0.5, gt=0, le=1,
                                             description="act only when this share of agents is fresh")
    verify_windows: int = Field(default=2, ge=1, le=100, description="windows measured before verifying")
    rollback_tolerance: float = Field(default=0.05, ge=0, le=100,
                                      description="noise in the measured imbalance: a placement is rolled back "
                                                  "unless the imbalance fell by half the predicted gain less this")

    @model_validator(mode="after")
    def _check(self) -> Policy:
        if self.max_moved_slots_per_hour_fraction < self.max_moved_slots_fraction:
            raise ValueError("max_moved_slots_per_hour_fraction must be >= max_moved_slots_fraction")
        if self.expert_capacity_factor_min > self.expert_capacity_factor_max:
            raise ValueError(f"expert_capacity_factor_min {self.expert_capacity_factor_min} exceeds "
                             f"expert_capacity_factor_max {self.expert_capacity_factor_max}")
        if self.topk_group_min and self.topk_group_max and self.topk_group_min > self.topk_group_max:
            raise ValueError(f"topk_group_min {self.topk_group_min} exceeds topk_group_max {self.topk_group_max}")
        unknown = set(self.replicas) - {"prefill", "decode", "unified"}
        if unknown:
            raise ValueError(f"replicas: unknown pool role(s) {sorted(unknown)}; use prefill, decode or unified")
        if self.gpu_budget is not None:
            floor = sum(b.min for b in self.replicas.values())
            if floor > self.gpu_budget:
                raise ValueError(f"gpu_budget {self.gpu_budget} is below the pools' minimum replicas ({floor})")
        return self


class Decision(StrEnum):
    keep = "keep"  # healthy, nothing to do
    hold = "hold"  # data not good enough to decide (stale, missing, cooling down)
    rebalance = "rebalance"


@dataclass(frozen=True)
class PlacementChange:
    """slot_to_expert, slot_share: [num_layers, num_slots]."""

    slot_to_expert: np.ndarray
    slot_share: np.ndarray | None
    current_imbalance: float
    predicted_imbalance: float
    num_moved_slots: int
    effect: Effect | None = None
    price: dict | None = None  # what the change gains against what it costs (controlplane/plan/placement_price.py)

    def predicted(self) -> dict:
        """The effect recorded on the action and shown to people."""
        return {"imbalance_before": round(self.current_imbalance, 4),
                "imbalance_after": round(self.predicted_imbalance, 4), "moved_slots": self.num_moved_slots,
                **({"effect": self.effect.to_json()} if self.effect else {}),
                **({"price": self.price} if self.price else {})}


@dataclass(frozen=True)
class Plan:
    deployment: str
    role: str
    decision: Decision
    reason: str
    inputs: dict = field(default_factory=dict)
    change: PlacementChange | None = None
    unparked: str | None = None  # the placement was parked and its inputs changed materially: why


@dataclass(frozen=True)
class PoolSizeStep:
    """What comes of asking a pool to run `replicas` instances: allowed or not, and why."""

    replicas: int
    current: int | None  # the size moectl set last; None: never sized by moectl
    is_allowed: bool
    reason: str

    @property
    def is_change(self) -> bool:
        return self.is_allowed and self.replicas != self.current

    def predicted(self) -> dict:
        return {"replicas_before": self.current, "replicas_after": self.replicas}


class VerifyOutcome(StrEnum):
    wait = "wait"
    verified = "verified"
    rolled_back = "rolled_back"
