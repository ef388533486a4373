"""One GPU budget for both pools: sum(replicas x GPUs per replica) <= budget.

When what the pools want fits, they get it. When it does not, each pool keeps what it has, up to what
it wants and never under its minimum. If even that is over a budget that shrank, replicas go where they
hurt least. The GPUs left go one replica at a time to the pool where more replicas buy the most:
the largest drop in its worst predicted latency/target ratio per GPU.
Without predictions (no model yet) the replicas left go to the pool furthest below what it wants.
"""

from __future__ import annotations

from collections.abc import Callable

from controlplane.observed.serving import PoolRole
from controlplane.solve.pools.view import PoolSize

INFEASIBLE = 10.0  # a ratio standing in for "cannot carry the load" so that benefits stay finite


def _loss(ratio: Callable[[PoolRole, int], float | None], role: PoolRole, replicas: int) -> float:
    now, fewer = ratio(role, replicas), ratio(role, replicas - 1)
    return 0.0 if now is None or fewer is None else min(fewer, INFEASIBLE) - min(now, INFEASIBLE)


def split_budget(wants: dict[PoolRole, int], pools: dict[PoolRole, PoolSize], budget: int | None,
                 ratio: Callable[[PoolRole, int], float | None]) -> dict[PoolRole, int]:
    """role -> replicas within the budget. ratio(role, n): worst predicted latency / target with n
    replicas (None when unknown)."""
    if budget is None or sum(wants[r] * pools[r].gpus_per_replica for r in wants) <= budget:
        return dict(wants)
    got = {r: max(pools[r].min_replicas, min(wants[r], pools[r].num_serving)) for r in wants}
    left = budget - sum(got[r] * pools[r].gpus_per_replica for r in got)

    def benefit(role: PoolRole) -> float:
        # the best gain per GPU of k more replicas, k up to what the pool wants: a pool that cannot carry
        # its load with one more replica may with two, and the first of them is worth buying
        now = ratio(role, got[role])
        best = 0.0
        for more in range(1, wants[role] - got[role] + 1):
            later = ratio(role, got[role] + more)
            if now is None or later is None:
                return (wants[role] - got[role]) / wants[role]
            best = max(best, (min(now, INFEASIBLE) - min(later, INFEASIBLE)) / (more * pools[role].gpus_per_replica))
        return best

    while left < 0:  # the budget shrank under what the pools hold: give back where it hurts least
        shrinkable = [r for r in got if got[r] > pools[r].min_replicas]
        if not shrinkable:
            return got
        role = max(shrinkable, key=lambda r: -_loss(ratio, r, got[r]) / pools[r].gpus_per_replica)
        got[role] -= 1
        left += pools[role].gpus_per_replica
    while True:
        open_roles = [r for r in got if got[r] < wants[r] and pools[r].gpus_per_replica <= left]
        if not open_roles:
            return got
        role = max(open_roles, key=benefit)
        got[role] += 1
        left -= pools[role].gpus_per_replica
