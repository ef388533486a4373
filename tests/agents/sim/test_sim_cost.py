"""The one step-cost model (agents/sim/cost.py): the busiest GPU sets the pace, rows are priced by the link
they cross, and each exchange pays its fixed time."""

from __future__ import annotations

import numpy as np
import pytest

from agents.sim.cost import CPU_GLOO, GPU_NODES, Traffic, step_times

SPREAD = Traffic(off_gpu_share=0.9, node_copies_per_row=0.4)


def test_the_busiest_gpu_sets_the_pace():
    even = step_times(np.full((4, 8), 100.0), num_tokens=200, traffic=SPREAD, links=GPU_NODES)
    skewed_rows = np.full((4, 8), 100.0)
    skewed_rows[:, 0], skewed_rows[:, 1] = 150.0, 50.0  # same total rows, one GPU hotter
    skewed = step_times(skewed_rows, num_tokens=200, traffic=SPREAD, links=GPU_NODES)
    assert skewed.forward_seconds > even.forward_seconds
    fixed = GPU_NODES.exchange_seconds * 4
    assert skewed.dispatch_seconds - fixed == pytest.approx(1.5 * (even.dispatch_seconds - fixed))
    assert even.dispatch_seconds == even.combine_seconds > 0


def test_one_rank_exchanges_nothing():
    alone = step_times(np.full((4, 1), 100.0), num_tokens=100, traffic=SPREAD, links=CPU_GLOO)
    assert alone.dispatch_seconds == alone.combine_seconds == 0 and alone.forward_seconds > 0


def test_on_gpus_across_nodes_the_network_copies_dominate_on_cpu_the_exchange_latency_does():
    rows = np.full((4, 8), 100.0)
    fewer_nodes = Traffic(off_gpu_share=0.9, node_copies_per_row=0.2)  # a tighter group limit
    gpu = [step_times(rows, 200, t, GPU_NODES).dispatch_seconds for t in (SPREAD, fewer_nodes)]
    cpu = [step_times(rows, 200, t, CPU_GLOO).dispatch_seconds for t in (SPREAD, fewer_nodes)]
    assert gpu[1] < 0.6 * gpu[0]  # half the network copies: close to half the exchange
    assert cpu[1] > 0.99 * cpu[0]  # latency-bound: the groups a token reaches barely matter


def test_the_exchange_latency_is_paid_per_step():
    rows = np.full((4, 8), 100.0)
    one, many = (step_times(rows, 200, SPREAD, CPU_GLOO, num_steps=n).dispatch_seconds for n in (1, 10))
    assert many - one == pytest.approx(9 * 4 * CPU_GLOO.exchange_seconds)
