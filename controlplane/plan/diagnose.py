"""Diagnoses: why a quality signal sits under its floor, before anything is changed for it. Pure.

MTP acceptance is read as a symptom, as DeepSeek-V3's operators did, not a number to chase: acceptance under
the policy's floor for `sustained_windows` windows is traced to one cause, and only load skew leads to
a rebalance.

Only windows that ran what is in force now are read: after a change (or its rollback) the evidence starts over.

1. Regression: a change made within the flap window, with acceptance at or above the floor before it and
   under it in every window since. Roll that change back.
2. Skew: some MoE layer's busiest GPU carries more than `imbalance_threshold` x its mean (a per-layer
   straggler the mean over layers can hide). Rebalance.
3. Routing: the routing limit in force is tighter than the model's own, so tokens miss experts the model
   was trained to use. Loosen toward the model's own limit.
4. Not load related: none of the above. It is recorded with the evidence (acceptance by draft position, the
   worst layer's imbalance, the limit and recall) for people, and exported for alerting. Speculation
   that fails on prompts past the model's trained context, or at draft depths the MTP module was not
   trained for, ends here: no knob of this controller fixes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from controlplane.desired import Mode, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window, acceptance_by_position

CHANGED = ("applied", "verified")  # statuses of a change still in force


class Cause(StrEnum):
    regression = "regression"
    skew = "skew"
    routing = "routing"
    not_load_related = "not_load_related"


@dataclass(frozen=True)
class MtpDiagnosis:
    cause: Cause
    reason: str
    evidence: dict = field(default_factory=dict)
    action_id: int | None = None  # regression: the change to roll back
    knob: str | None = None


def _acceptance(windows: list[Window] | tuple[Window, ...]) -> list[float | None]:
    return [w.ratio("spec_accepted_tokens", "spec_draft_tokens") for w in windows]


def diagnose_mtp(policy: Policy, pool: PoolState, now: float) -> MtpDiagnosis | None:
    """None while acceptance is not persistently under the policy's floor (or no floor is set)."""
    floor = policy.mtp_acceptance_floor
    if policy.mode == Mode.off or floor is None:
        return None
    # only windows that ran what is in force now: a change (or its rollback) since asks for new evidence
    since = max(pool.routing_changed_at or 0.0, pool.last_change_at or 0.0)
    windows = [w for w in pool.windows if w.start >= since][-policy.sustained_windows:]
    acceptance = _acceptance(windows)
    if len(windows) < policy.sustained_windows or any(a is None or a >= floor for a in acceptance):
        return None
    limit, recall = pool.effective_topk_group, pool.signals(windows)["routing_recall"]
    layers = [w.layer_imbalance(pool.ep_size) for w in windows]
    worst = max((float(x.max()) for x in layers if x is not None and len(x)), default=None)
    evidence = {"mtp_acceptance": [round(a, 4) for a in acceptance], "floor": floor,
                "acceptance_by_position": acceptance_by_position(windows),
                "worst_layer_imbalance": None if worst is None else round(worst, 4),
                "topk_group": limit, "model_topk_group": pool.model_topk_group,
                "routing_recall": None if recall is None else round(recall, 4), "windows": [w.index for w in windows]}
    low = f"MTP acceptance {acceptance[-1]:.2f} under floor {floor} for {len(windows)} windows"

    for change in reversed(pool.changes):
        if now - change.at > policy.flap_window_seconds:
            break
        before = change.effect.context.get("mtp_acceptance") if change.effect else None
        after = _acceptance([w for w in pool.windows if w.start >= change.at])
        if change.status in CHANGED and before is not None and before >= floor \
                and len(after) >= policy.sustained_windows and all(a is not None and a < floor for a in after):
            return MtpDiagnosis(Cause.regression, f"{low}: a regression of action {change.action_id} "
                                                  f"({change.knob}; acceptance {before:.2f} before it): roll it back",
                                evidence | {"acceptance_before_change": before}, change.action_id, change.knob)
    if worst is not None and worst > policy.imbalance_threshold:
        return MtpDiagnosis(Cause.skew, f"{low}: load skew (a layer's busiest GPU at {worst:.2f}x its mean > "
                                        f"{policy.imbalance_threshold}): rebalance", evidence)
    if pool.model_topk_group is not None and limit < pool.model_topk_group:
        return MtpDiagnosis(Cause.routing, f"{low}: routing limit {limit} is tighter than the model's own "
                                           f"{pool.model_topk_group}" + (f" (recall {recall:.2f})" if recall else "")
                            + ": loosen", evidence)
    positions = evidence["acceptance_by_position"]
    depth = f"; by draft position {', '.join(f'{p:.2f}' for p in positions)}" if positions else ""
    return MtpDiagnosis(Cause.not_load_related,
                        f"{low}: not load related (worst layer {worst or 0:.2f}x its mean, the model's own routing "
                        f"limit, no change within {policy.flap_window_seconds:.0f}s{depth}): look at the prompts "
                        f"(past the model's trained context?) and the draft depth", evidence)


def diagnose_prefix_hits(policy: Policy, pool: PoolState) -> tuple[str, list[float]] | None:
    """A finding when the prefix-cache hit ratio stays under the policy's floor. Nothing in the
    placement fixes it (requests miss the instances holding their prefixes, or the cache thrashes),
    so the loop records it for people instead of acting. Returns the finding and the ratios it read."""
    if policy.mode == Mode.off or policy.prefix_hit_floor is None:
        return None
    windows = pool.windows[-policy.sustained_windows:]
    ratios = [w.ratio("prefix_hit_tokens", "prefix_query_tokens") for w in windows]
    if len(windows) < policy.sustained_windows or any(r is None or r >= policy.prefix_hit_floor for r in ratios):
        return None
    finding = (f"prefix hit ratio {ratios[-1]:.2f} under floor {policy.prefix_hit_floor} for {len(ratios)} windows: "
               f"check the router's prefix affinity and the KV cache's size (no placement change helps)")
    return finding, ratios
