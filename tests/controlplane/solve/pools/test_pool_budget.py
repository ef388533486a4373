"""The joint GPU budget (controlplane/solve/pools/budget.py)."""

from __future__ import annotations

from controlplane.solve.pools.budget import split_budget
from controlplane.solve.pools.view import PoolSize

POOLS = {"prefill": PoolSize(2, gpus_per_replica=1), "decode": PoolSize(3, gpus_per_replica=2)}


def ratio(prefill_load: float, decode_load: float):
    """Worst predicted latency / target ~ load per replica (a queue past 1 is infeasible)."""
    def of(role: str, replicas: int) -> float:
        per = (prefill_load if role == "prefill" else decode_load) / replicas
        return per / (1 - per) if per < 1 else float("inf")
    return of


def test_what_fits_is_given():
    assert split_budget({"prefill": 4, "decode": 5}, POOLS, 14, ratio(1, 1)) == {"prefill": 4, "decode": 5}
    assert split_budget({"prefill": 9, "decode": 9}, POOLS, None, ratio(1, 1)) == {"prefill": 9, "decode": 9}


def test_scarce_gpus_go_where_they_buy_the_most():
    # 2 GPUs left over what the pools hold: decode is nearly saturated, prefill idle
    got = split_budget({"prefill": 4, "decode": 5}, POOLS, 10, ratio(0.5, 2.9))
    assert got == {"prefill": 2, "decode": 4}
    got = split_budget({"prefill": 4, "decode": 5}, POOLS, 10, ratio(1.9, 0.5))
    assert got == {"prefill": 4, "decode": 3}


def test_a_pool_keeps_what_it_has_when_the_other_wants_more():
    got = split_budget({"prefill": 2, "decode": 9}, POOLS, 10, ratio(1.5, 5.0))
    assert got["prefill"] == 2 and got["prefill"] + 2 * got["decode"] <= 10


def test_a_shrunk_budget_takes_back_where_it_hurts_least():
    pools = {"prefill": PoolSize(4, gpus_per_replica=1), "decode": PoolSize(5, gpus_per_replica=2)}
    got = split_budget({"prefill": 4, "decode": 5}, pools, 12, ratio(0.5, 4.0))
    assert got["prefill"] + 2 * got["decode"] <= 12 and got["decode"] == 5


def test_without_predictions_the_pool_furthest_below_its_want_goes_first():
    got = split_budget({"prefill": 3, "decode": 9}, POOLS, 12, lambda role, n: None)
    assert got == {"prefill": 2, "decode": 5}
