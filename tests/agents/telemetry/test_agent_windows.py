"""Windows on the controller's grid, their snapshot, and per-request latencies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.ranks import SIM_MODEL, identity
from support.step_stats import output, step

from agents.telemetry.latency import RequestTimer
from agents.telemetry.windows import WindowBuilder


def test_a_window_closes_on_the_grid_with_the_sums_of_its_steps():
    builder = WindowBuilder(identity(1, 2), SIM_MODEL, window_seconds=2.0, now=1001.3)
    timer = RequestTimer()
    for i, now in enumerate((1001.3, 1001.6, 1001.9)):
        stats = step(i, now)
        builder.add(stats, timer.observe(stats))
        assert builder.roll(now) is None
    closed = builder.roll(1002.0)
    s = closed.snapshot
    assert s.window_start == 1000.0 and s.window_seconds == 2.0  # index 500 on a 2 s grid
    assert s.num_steps == 3 and s.forward_seconds == pytest.approx(0.03)
    assert s.dispatch_seconds == pytest.approx(0.006) and s.combine_seconds == pytest.approx(0.003)
    assert (s.prefix_query_tokens, s.prefix_hit_tokens) == (96, 48)
    assert (s.spec_drafts, s.spec_draft_tokens, s.spec_accepted_tokens) == (6, 12, 9)
    assert (s.requests_running, s.requests_waiting) == (2, 1)  # gauges: the value at the window's end
    assert s.routing_recall == pytest.approx(0.75)
    assert s.expert_tokens.to_numpy()[0, :2].tolist() == [12, 0]
    assert s.slot_tokens.to_numpy().shape == (4, 20) and s.slot_tokens.to_numpy()[:, 0].tolist() == [9] * 4
    assert s.identity.rank == 1
    np.testing.assert_allclose(closed.recall, [0.75] * 4)
    # the next window starts empty, on the index of the time it opened
    assert builder.current.index == 501 and builder.current.num_steps == 0


def test_an_idle_window_still_closes_so_the_agent_stays_fresh():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=2000.2)
    closed = builder.roll(2001.0)
    assert closed.snapshot.num_steps == 0 and closed.snapshot.routing_recall is None
    assert closed.snapshot.expert_tokens.to_numpy().sum() == 0


def test_a_new_window_length_starts_a_new_window():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=3000.1)
    builder.add(step(0, 3000.1), RequestTimer().observe(step(0, 3000.1)))
    closed = builder.set_window_seconds(5.0, now=3000.5)
    assert closed is not None and closed.snapshot.window_seconds == 1.0
    assert builder.current.index == 600 and builder.roll(3004.9) is None and builder.roll(3005.0) is not None


def test_counters_of_the_wrong_shape_are_refused_not_reshaped():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=10.0)
    stats = step(0, 10.0)
    stats.moe.slot_tokens = torch.zeros(4, 16, dtype=torch.int64)
    builder.add(stats, RequestTimer().observe(stats))
    with pytest.raises(ValueError, match="shape"):
        builder.roll(11.0)


def test_ttft_once_itl_per_token_and_no_ttft_for_a_handed_off_request():
    timer = RequestTimer()
    first = timer.observe(step(0, 10.0, outputs=[output("a", [1], 1, arrival=9.5, first=10.0),
                                                 output("b", [7], 2, arrival=9.0, first=None)]))
    assert first.ttft == [pytest.approx(0.5)] and first.queue == [pytest.approx(0.01)]
    assert first.itl == []  # "b" arrived with its first token from a prefill instance: no TTFT claimed here
    second = timer.observe(step(1, 10.3, outputs=[output("a", [2, 3, 4], 4, arrival=9.5, first=10.0),
                                                  output("b", [8], 3, finished=True)]))
    assert second.ttft == [] and second.itl == [pytest.approx(0.1), pytest.approx(0.3)]
    assert "b" not in timer.last_token_time


def test_the_groups_and_nodes_tokens_reached_are_summed_over_steps_and_layers():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=20.0)
    for i, now in enumerate((20.1, 20.5)):
        stats = step(i, now, groups=[0, 1, 5, 2, 0], nodes=[0, 6, 2, 0, 0])  # per layer, 4 layers
        builder.add(stats, RequestTimer().observe(stats))
    s = builder.roll(21.0).snapshot
    assert s.routing_groups_per_token == [0, 8, 40, 16, 0] and s.routing_nodes_per_token == [0, 48, 16, 0, 0]
    # an engine that does not count them reports nothing, which is not "no token reached a group"
    builder.add(step(2, 21.2), RequestTimer().observe(step(2, 21.2)))
    s = builder.roll(22.0).snapshot
    assert s.routing_groups_per_token == [] and s.routing_nodes_per_token == []


def test_a_window_that_switches_tables_counts_its_slots_under_the_new_one_only():
    """A slot holds another expert after a switch: slot counts of both tables summed would judge the new placement
    on steps that ran the old one."""
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=30.0)
    for i, (now, version) in enumerate(((30.1, 0), (30.3, 0), (30.6, 1))):
        stats = step(i, now)
        stats.placement_version = version
        stats.moe.slot_tokens[:, 1] = 10 * version  # the new table sends tokens to slot 1 as well
        builder.add(stats, RequestTimer().observe(stats))
    s = builder.roll(31.0).snapshot
    assert s.placement_version == 1 and s.num_steps == 3
    assert s.slot_tokens.to_numpy()[:, :2].tolist() == [[3, 10]] * 4  # the last step's, not [9, 10]
    assert s.expert_tokens.to_numpy()[0, 0] == 12  # the router's counts do not depend on the table: all steps


def test_a_placement_switch_is_counted_with_the_seconds_it_took():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=1.0, now=4000.1)
    timer = RequestTimer()
    for i, (now, switch) in enumerate(((4000.1, None), (4000.4, 0.25), (4000.7, None))):
        stats = step(i, now)
        stats.placement_switch_seconds = switch  # the engine timed the switch this step made (agents/runtime)
        builder.add(stats, timer.observe(stats))
    switched = builder.roll(4001.0).snapshot
    assert switched.balancer_events == 1 and switched.balancer_stall_seconds == pytest.approx(0.25)
    stats = step(3, 4001.2)
    builder.add(stats, timer.observe(stats))
    quiet = builder.roll(4002.0).snapshot
    assert quiet.balancer_events == 0 and quiet.balancer_stall_seconds is None
    assert "balancer_stall_seconds" not in quiet.model_dump_json()  # absent, as before the field existed
