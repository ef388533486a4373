"""Routing limits: how many expert groups a token may use (`topk_group`). Pure.

Fewer groups per token means fewer nodes each token's hidden state travels to, so less all-to-all;
the price is routing quality. The seeds' DeepSeek numbers: limiting groups cut cross-node all-to-all
from >35% to ~12% of step time, when the exchange was the bottleneck. Where it is not (a dense
all-to-all over gloo on one CPU, a single GPU node), fewer groups barely change its time: every step
therefore carries its predicted effect, and verify reverts a step whose effect did not happen.

Quality is judged against the model's own routing, not the unconstrained top-k: `recall` is the share
of the experts the model's own limit (ModelShape.topk_group) picks that the limited router keeps. The
bundled model is trained with topk_group=2, where it keeps only 0.79 of the unconstrained top-4; a floor
against the unconstrained top-k would demand a limit looser than the one the model was trained with.
So the loop works between the policy's lowest limit and the model's own, never looser: routing past
the trained limit takes the model out of its training distribution (MTP acceptance falls).

The rule is a bounded step with hysteresis on the signal. Tighten to the nearest limit predicted to bind
(one group at a time once limits bind) while the all-to-all
share stays above target and recall has `RECALL_MARGIN` to spare above its floor. Loosen by one only
when recall falls under the floor. Loosening because the share is low would undo the cause of the
low share and flap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.desired import Effect

# tighten only with this much recall to spare: one group less costs recall, and a step that lands
# under the floor would be undone by the next pass, then retried: a flap
RECALL_MARGIN = 0.05
SHARE_TOLERANCE = 0.01  # noise of a window's all-to-all share on a busy machine
RECALL_TOLERANCE = 0.02
# a step predicted to move the share less than this is not worth a change (a limit looser than the groups
# tokens reach anyway)
MIN_PREDICTED_SHARE_MOVE = 0.01


@dataclass(frozen=True)
class RoutingStep:
    topk_group: int | None  # None: no limit issued (the model's own)
    reason: str
    effect: Effect | None = None  # what the step aims at; None for holds and for a bound enforced
    unparked: str | None = None  # the knob was parked and its inputs changed materially: why

    def is_change_from(self, current: int | None) -> bool:
        return self.topk_group != current


def groups_reached(limit: int, num_groups: int, top_k: int) -> float:
    """Expected groups one token's top_k experts span under a limit, were the experts drawn evenly over the
    groups: E[min(distinct groups, limit)]. The controller's prior for how all-to-all traffic scales with the
    limit (what happens is measured)."""
    # p[d]: probability that the draws so far hit d distinct groups (the occupancy distribution)
    p = [1.0] + [0.0] * num_groups
    for _ in range(top_k):
        p = [p[d] * d / num_groups + (p[d - 1] * (num_groups - d + 1) / num_groups if d else 0.0)
             for d in range(num_groups + 1)]
    return sum(prob * min(d, limit) for d, prob in enumerate(p))


def predicted_share(share: float, groups_from: int, groups_to: int, num_groups: int, top_k: int) -> float:
    """The all-to-all share after moving the limit, if all-to-all time scales with the groups reached and
    the rest of the step stays: an upper bound on what a limit can do."""
    factor = groups_reached(groups_to, num_groups, top_k) / groups_reached(groups_from, num_groups, top_k)
    exchange = share * factor
    return exchange / (exchange + 1.0 - share)


@dataclass(frozen=True)
class GroupLimits:
    """What bounds a pool's topk_group: the model's shape and its own limit (`model_limit`, None: every group),
    and the policy's range (None: unbounded)."""

    num_groups: int
    num_experts: int
    top_k: int
    model_limit: int | None = None
    min_groups: int | None = None
    max_groups: int | None = None

    def range(self) -> tuple[int, int]:
        """[lowest, highest] groups per token the loop may set: top_k must fit (topk_group * experts_per_group >=
        top_k), the policy's range, and never looser than the model's own limit."""
        lowest = max(self.min_groups or 1, math.ceil(self.top_k / (self.num_experts // self.num_groups)))
        highest = min(self.max_groups or self.num_groups, self.model_limit or self.num_groups, self.num_groups)
        return lowest, highest


def plan_topk_group(*, current: int | None, limits: GroupLimits, all2all_share: list[float], recall: list[float],
                    target: float, recall_floor: float) -> RoutingStep:
    """all2all_share, recall: the recent windows' values, oldest first (sustained); recall against the
    model's own routing. current: the limit the controller issued (None: none, so the model routes with
    its own limit, or with every group)."""
    num_groups, top_k, default = limits.num_groups, limits.top_k, limits.model_limit
    lowest, highest = limits.range()
    if lowest > highest:
        return RoutingStep(current, f"no legal topk_group: range [{lowest}, {highest}]")
    groups = current or default or num_groups
    if not all2all_share:
        return RoutingStep(current, "no all-to-all measurements yet")
    if not lowest <= groups <= highest:
        clamped = min(max(groups, lowest), highest)
        return RoutingStep(clamped, f"topk_group {groups} outside [{lowest}, {highest}] (the policy's range, "
                                    f"no looser than the model's own {default or num_groups})")
    is_recall_low = bool(recall) and all(r < recall_floor for r in recall)
    if is_recall_low and groups < highest:
        before = sum(recall) / len(recall)
        # the model's own limit keeps all of its own picks; a step short of it, a share of the way
        predicted = 1.0 if groups + 1 == highest else before + (1.0 - before) / (highest - groups)
        return RoutingStep(groups + 1, f"routing recall {recall[-1]:.2f} under floor {recall_floor}: loosen",
                           Effect("routing_recall", +1, before, predicted, RECALL_TOLERANCE))
    if all(s > target for s in all2all_share) and groups > lowest and not is_recall_low:
        if recall and min(recall) < recall_floor + RECALL_MARGIN:
            return RoutingStep(current, f"all-to-all share {all2all_share[-1]:.2f} > {target}, but recall is "
                                        f"near its floor {recall_floor}")
        before = sum(all2all_share) / len(all2all_share)
        # the nearest tighter limit that binds: a limit above the groups tokens reach anyway changes nothing
        step = next(((g, p) for g in range(groups - 1, lowest - 1, -1)
                     if before - (p := predicted_share(before, groups, g, num_groups, top_k))
                     >= MIN_PREDICTED_SHARE_MOVE), None)
        if step is None:
            return RoutingStep(current, f"all-to-all share {before:.2f} > {target}, but no tighter limit is "
                                        f"predicted to save {MIN_PREDICTED_SHARE_MOVE} of it")
        return RoutingStep(step[0], f"all-to-all share {all2all_share[-1]:.2f} > target {target}: tighten",
                           Effect("all2all_share", -1, before, step[1], SHARE_TOLERANCE,
                                  floors={"routing_recall": recall_floor}))
    return RoutingStep(current, "routing limits hold")
