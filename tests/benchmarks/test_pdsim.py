"""The PD simulator (benchmarks/pdsim/): conservation of requests, drain, startup, what it measures."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.pools import TARGETS, Scripted

from benchmarks.baselines.static import StaticPools
from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.outcome import flaps, gpu_hours, meets_targets, outcome
from benchmarks.pdsim.replicas import REMOVED
from benchmarks.pdsim.requests import ABORTED, DONE
from benchmarks.pdsim.simulator import SimConfig, simulate
from benchmarks.pdsim.trace import bursty, diurnal, step
from controlplane.plan.pools import fit_latency
from controlplane.solve.pools.decision import DecisionKind, PoolDecision

CONFIG = SimConfig(targets=TARGETS, initial={"prefill": 3, "decode": 4}, tail_seconds=300.0)


def test_traces_are_seeded_and_shaped():
    a, b = step(600, 5.0, 15.0, seed=7), step(600, 5.0, 15.0, seed=7)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.input_tokens, b.input_tokens)
    thirds = np.histogram(a.arrival, bins=3, range=(0, 600))[0]
    assert thirds[1] > 2 * thirds[0] and thirds[1] > 2 * thirds[2]
    day = diurnal(600, 2.0, 20.0, seed=1)
    assert day.peak(60)[1] > 4 * np.histogram(day.arrival, bins=10)[0][0] / 60
    assert bursty(600, 5.0, seed=3).num_requests > 0


def test_every_request_finishes_when_the_pools_carry_the_load():
    trace = step(300, 6.0, 6.0, seed=1)
    result = simulate(trace, StaticPools({"prefill": 3, "decode": 4}), CONFIG)
    assert (result.requests.status == DONE).all()
    assert (result.requests.first_token >= result.requests.arrival).all()
    assert (result.requests.finish >= result.requests.first_token).all()
    assert meets_targets(result, TARGETS, skip_seconds=30.0)


def test_overload_leaves_requests_unserved_and_counted():
    trace = step(300, 40.0, 40.0, seed=2)
    result = simulate(trace, StaticPools({"prefill": 1, "decode": 1}), replace(CONFIG, tail_seconds=10.0))
    measured = outcome(result, 300.0)
    assert measured.num_unserved > 0 and measured.num_aborted == 0
    assert (result.requests.status == DONE).sum() + measured.num_unserved == trace.num_requests
    assert measured.attainment < 0.5


def drain_run(drain: bool):
    trace = step(400, 8.0, 8.0, seed=3)
    planner = Scripted([(0.0, {"prefill": 3, "decode": 4}), (100.0, {"prefill": 1, "decode": 1})])
    return trace, simulate(trace, planner, replace(CONFIG, drain=drain))


def test_drain_never_drops_in_flight_work():
    trace, result = drain_run(drain=True)
    assert (result.requests.status == DONE).all()  # load 8 req/s on 1+1 replicas still finishes in the tail
    removed = [r for r in result.replicas if r.state == REMOVED]
    assert len(removed) == 5 and all(r.removed_at >= 100.0 for r in removed)
    assert any(r.removed_at > 100.0 for r in removed if r.role == "decode")  # it waited for its sequences


def test_removal_without_drain_fails_what_the_replica_held():
    trace, result = drain_run(drain=False)
    status = result.requests.status
    assert (status == ABORTED).sum() > 0
    assert (status == ABORTED).sum() + (status == DONE).sum() + outcome(result, 300).num_unserved == trace.num_requests
    assert all(r.removed_at == 100.0 for r in result.replicas if r.state == REMOVED)


def test_a_new_replica_serves_only_after_its_startup():
    cost = EngineCost(startup_seconds=60.0)
    planner = Scripted([(0.0, {"prefill": 1, "decode": 1}), (50.0, {"prefill": 2, "decode": 1})])
    result = simulate(step(200, 3.0, 3.0, seed=4), planner,
                      replace(CONFIG, cost=cost, initial={"prefill": 1, "decode": 1}))
    ready = {row["t"]: row["prefill_ready"] for row in result.timeline}
    serving = {row["t"]: row["prefill_serving"] for row in result.timeline}
    assert (serving[50.0], ready[50.0], ready[100.0], ready[120.0]) == (2, 1, 1, 2)
    new = result.replicas[-1]
    assert new.created_at == 50.0 and new.ready_at == 110.0
    # GPU-hours count it from the moment it was asked for: 1 prefill GPU + 2 decode GPUs all along, + 150 s
    assert gpu_hours(result) == pytest.approx((200 * (1 + 2) + 150 * 1) / 3600)


def test_the_model_learns_the_simulators_step_costs():
    trace = diurnal(900, 4.0, 20.0, seed=5)
    result = simulate(trace, StaticPools({"prefill": 4, "decode": 5}), replace(CONFIG, initial={"prefill": 4,
                                                                                                 "decode": 5}))
    model = fit_latency(tuple(result.windows))
    cost = EngineCost()
    for batch in (10, 30, 50):
        kv = batch * 1400.0
        assert model.decode_itl("mean", batch, kv, 0.0) == pytest.approx(cost.decode_step(batch, kv), rel=0.15)
    full = cost.prefill_max_batch_tokens / cost.prefill_step(cost.prefill_max_batch_tokens)
    assert model.prefill.capacity == pytest.approx(full, rel=0.05)


def test_flaps_are_reversals_within_the_cooldown():
    def change(at, role, direction):
        return PoolDecision(at, role, 3, 3 + direction, DecisionKind.reactive, "")
    decisions = [change(0, "decode", 1), change(100, "prefill", -1), change(200, "decode", -1),
                 change(600, "decode", 1), change(650, "decode", 1)]
    assert flaps(decisions, 300.0) == 1  # decode down 200 s after up; up 400 s after down is not a flap
