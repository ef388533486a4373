"""Routing limits: how many expert groups a token may use (`topk_group`). Pure.

Fewer groups per token means fewer nodes each token's hidden state travels to, so less all-to-all;
the price is routing recall (the share of the unconstrained top-k experts a token still gets). The
seeds' DeepSeek numbers: limiting groups cut cross-node all-to-all from >35% to ~12% of step time.
The rule is a bounded step: tighten by one group while the all-to-all share stays above target and
recall above its floor; loosen by one only when recall falls under the floor. Loosening because the
share is low would undo the cause of the low share and flap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# tighten only with this much recall to spare: one group less costs recall, and a step that lands
# under the floor would be undone by the next pass, then retried: a flap
RECALL_MARGIN = 0.05

@dataclass(frozen=True)
class RoutingStep:
    topk_group: int | None  # None: no limit (every group)
    reason: str

    def is_change_from(self, current: int | None) -> bool:
        return self.topk_group != current


def plan_topk_group(*, current: int | None, num_groups: int, num_experts: int, top_k: int,
                    all2all_share: list[float], recall: list[float], target: float,
                    recall_floor: float, min_groups: int | None = None, max_groups: int | None = None,
                    default: int | None = None) -> RoutingStep:
    """all2all_share, recall: the recent windows' values, oldest first, all the same length (sustained).
    current: the limit the controller issued (None: none, so the model routes with `default`, its own
    limit, or with every group).

    min_groups/max_groups: the policy's range; the floor is also what top_k needs:
    topk_group * experts_per_group >= top_k.
    """
    experts_per_group = num_experts // num_groups
    lowest = max(min_groups or 1, math.ceil(top_k / experts_per_group))
    highest = min(max_groups or num_groups, num_groups)
    if lowest > highest:
        return RoutingStep(current, f"no legal topk_group: range [{lowest}, {highest}]")
    groups = current or default or num_groups
    if not all2all_share:
        return RoutingStep(current, "no all-to-all measurements yet")
    if not lowest <= groups <= highest:
        clamped = min(max(groups, lowest), highest)
        return RoutingStep(clamped, f"topk_group {groups} outside the policy's range [{lowest}, {highest}]")
    is_recall_low = bool(recall) and all(r < recall_floor for r in recall)
    if is_recall_low and groups < highest:
        return RoutingStep(groups + 1, f"routing recall {recall[-1]:.2f} under floor {recall_floor}: loosen")
    if all(s > target for s in all2all_share) and groups > lowest and not is_recall_low:
        if recall and min(recall) < recall_floor + RECALL_MARGIN:
            return RoutingStep(current, f"all-to-all share {all2all_share[-1]:.2f} > {target}, but recall is "
                                        f"near its floor {recall_floor}")
        return RoutingStep(groups - 1, f"all-to-all share {all2all_share[-1]:.2f} > target {target}: tighten")
    return RoutingStep(current, "routing limits hold")
