"""A short run of the closed loop with change costs (benchmarks/closed_loop_costs.py): the ordering the design
claims, not its numbers (those come from the full run in benchmarks/results/)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from benchmarks import closed_loop_costs as costs
from benchmarks.closed_loop import PREFILL
from controlplane.plan.change_price import ChangeCost

SMALL = replace(PREFILL, name="prefill EP32, 4 MoE layers", num_layers=4)


@pytest.mark.parametrize("workload", costs.WORKLOADS, ids=["pays", "does-not-pay"])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_pricing_never_finishes_below_static_and_the_bound_is_above_every_row(workload, engine):
    trace = costs.make_trace(SMALL, workload, hours=48 * costs.WINDOW_SECONDS / costs.HOUR)
    rows = costs.run_case(trace, engine, progress=lambda *a, **k: None)
    static, pricing, best = rows[0], next(r for r in rows if r.name == "moectl pricing its changes"), rows[-1]
    assert static.name == "static" and best.name == "bound: best schedule in hindsight"
    assert static.num_changes == 0
    assert pricing.served >= static.served * (1 - 1e-9)  # the long-fit row is a diagnostic: no claim on it
    assert all(best.served >= r.served * (1 - 1e-9) for r in rows)
    names = ("bound over placements knowable at the time", "bound over knowable placements and 8-min lines ahead")
    knowable, lines = (next(r for r in rows if r.name == name) for name in names)
    assert lines.served >= knowable.served * (1 - 1e-9)  # its candidates hold the knowable ones
    assert knowable.served >= pricing.served * (1 - 1e-9)  # and those hold the pricing row's own
    if engine == "sglang":  # a restart costs three minutes of a four-minute trace: nothing pays it back
        assert pricing.num_changes == 0 and best.num_changes == 0


def changes_of(tables: list) -> list[int]:
    return [w for w in range(1, len(tables)) if tables[w] is not tables[w - 1]]


def test_the_program_finds_the_best_schedule_over_its_candidates():
    """Brute force over every schedule of three placements on six windows, with made-up rates."""
    rng = np.random.default_rng(0)
    num_windows = 6
    trace = costs.make_trace(SMALL, costs.WORKLOADS[0], hours=num_windows * costs.WINDOW_SECONDS / costs.HOUR)
    others = [object(), object()]
    candidates = [trace.start, *others]
    available = [(p, 0) for p in candidates]
    for w in range(num_windows):
        for p in candidates:
            trace._rates[(w, id(p))] = (p, float(rng.uniform(1.0, 1.6)))
    for stall in (0.0, 2.0, 50.0):
        cost = ChangeCost(stall, "test")
        found = costs.bound(trace, available, cost)
        schedules = ([trace.start, *tables] for tables in itertools.product(candidates, repeat=num_windows - 1))
        brute = max(costs.served(trace, costs.Schedule("x", s, changes_of(s)), cost) for s in schedules)
        assert costs.served(trace, found, cost) == pytest.approx(brute)
    assert costs.bound(trace, available, ChangeCost(1e6, "test")).changes == []  # too dear: keep the start
    # a placement known only from window 4 on is not switched to before it
    late = costs.bound(trace, [(trace.start, 0), (others[0], 4)], ChangeCost(0.0, "test"))
    assert all(p is trace.start for p in late.tables[:4])
