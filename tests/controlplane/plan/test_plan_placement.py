"""The planner's hysteresis and safety rails, on plain arrays."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.pool_states import (
    EP,
    NUM_EXPERTS,
    NUM_LAYERS,
    SLOTS_PER_RANK,
    every_rank_reported,
    loop_window,
    skewed_window,
)
from support.pool_states import skewed_pool as pool

from agents.protocol import PlacementTable, default_slot_to_expert
from controlplane.desired import Decision, KnobKind, Mode, Policy
from controlplane.learn.forecast import MAX_LEVEL_WINDOWS, forecast_load
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.window import RANK_REPORTS
from controlplane.plan.placement import plan_placement
from controlplane.solve.placement.algorithm import MigrationAware

SPR = SLOTS_PER_RANK
EVERY_RANK = every_rank_reported(EP)  # each rank's slot load is in


AUTO = Policy(mode=Mode.auto, cooldown_seconds=60, max_moved_slots_fraction=0.5)


def test_sustained_imbalance_is_rebalanced_within_the_moves_budget():
    plan = plan_placement(AUTO, pool(), now=1000.0)
    assert plan.decision == Decision.rebalance, plan.reason
    change = plan.change
    assert change.predicted_imbalance < change.current_imbalance - AUTO.min_gain
    assert 0 < change.num_moved_slots <= AUTO.max_moved_slots_fraction * NUM_LAYERS * EP * SPR
    assert change.num_moved_slots == int((change.slot_to_expert != pool().slot_to_expert).sum())


def test_a_pool_whose_shape_is_the_limit_says_so_and_still_gains_what_it_can():
    # one slot per GPU, as DeepSeek's decode pool: 20 slots for 16 experts leave the hot expert (2000 of a layer's
    # 3500 tokens) 5 replicas of 400 tokens each, where the mean GPU carries 175: no table gets under 400/175
    ep = 20
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, ep)
    limited = replace(pool(), ep_size=ep, slots_per_rank=1, num_agents=ep, num_fresh_agents=ep, slot_to_expert=table,
                      windows=tuple(skewed_window(i, table, ep=ep) for i in range(3)))
    plan = plan_placement(AUTO, limited, now=1000.0)
    assert plan.decision == Decision.rebalance
    assert plan.inputs["imbalance_floor"] == pytest.approx(400 / 175, abs=1e-4)
    assert "the pool's shape is the limit: no placement of its 20 slots on 20 GPUs gets under 2.286" in plan.reason
    assert plan.inputs["imbalance_floor"] - 1e-4 <= plan.change.predicted_imbalance < plan.change.current_imbalance
    # five slots per GPU give the hot expert a replica on every GPU: the threshold is within reach, nothing to say
    roomy = plan_placement(AUTO, pool(), now=1000.0)
    assert roomy.inputs["imbalance_floor"] == 1.0 and "shape" not in roomy.reason


@pytest.mark.parametrize("state, words", [
    (pool(fresh=1), "agents are fresh"),
    (pool(num_windows=1), "need 2"),
    (pool(last_change_at=990.0), "cooling down"),
    (pool(moved_slots_last_hour=1000), "moves budget spent"),
])
def test_holds_when_it_should_not_act(state, words):
    plan = plan_placement(AUTO, state, now=1000.0)
    assert plan.decision == Decision.hold and words in plan.reason


def test_a_window_the_ranks_switched_late_in_is_not_a_sustained_window():
    # window 2's slot counts restarted at a switch near its end: they cover a tenth of its expert load
    state = pool()
    late = replace(state.windows[2], slot_tokens=state.windows[2].slot_tokens / 10)
    plan = plan_placement(AUTO, replace(state, windows=(state.windows[0], late)), now=1000.0)
    assert plan.decision == Decision.hold and "1 complete windows under placement v0, need 2" in plan.reason
    assert plan_placement(AUTO, replace(state, windows=(state.windows[0], state.windows[2])), now=1000.0).decision == \
        Decision.rebalance


def test_keeps_a_balanced_pool_and_an_off_policy():
    mild = pool(hot=1.0)  # replicas of experts 0-3 leave max/mean at 1.25
    assert mild.windows[-1].imbalance(EP) == pytest.approx(1.25)
    assert plan_placement(Policy(mode=Mode.auto, imbalance_threshold=1.3), mild, now=1000.0).decision == Decision.keep
    assert plan_placement(Policy(mode=Mode.off), pool(), now=1000.0).decision == Decision.keep


def test_the_policys_gain_per_moved_slot_is_the_solvers_bar():
    # a mild skew the local search answers with a few moves; past a higher bar per moved residency those moves
    # do not pay, and the plan is the one the solver gives with that bar (here: its fresh solve of the layers)
    mild = pool(hot=1.5)
    own = plan_placement(AUTO, mild, now=1000.0)
    barred = plan_placement(AUTO.model_copy(update={"min_gain_per_moved_slot": 0.1}), mild, now=1000.0)
    solver = plan_placement(AUTO, mild, now=1000.0, algorithm=MigrationAware(min_gain_per_move=0.1))
    assert own.decision == barred.decision == Decision.rebalance, (own.reason, barred.reason)
    assert not np.array_equal(barred.change.slot_to_expert, own.change.slot_to_expert)
    assert np.array_equal(barred.change.slot_to_expert, solver.change.slot_to_expert)
    assert barred.change.num_moved_slots <= AUTO.max_moved_slots_fraction * NUM_LAYERS * EP * SPR


def test_group_locality_keeps_each_groups_replicas_on_one_node():
    """4 GPUs on 2 nodes, 4 groups of 4 experts, one hot expert per group: replicas stay in their node."""
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, EP * SPR)
    load = np.full((NUM_LAYERS, NUM_EXPERTS), 100.0)
    load[:, [1, 6, 11, 12]] *= 6
    slot_tokens = PlacementTable(table).slot_load(load)
    windows = tuple(loop_window(i, load, slot_tokens, num_reports=EP, counters=EVERY_RANK) for i in range(3))
    two_nodes = replace(pool(), gpus_per_node=2, windows=windows)
    local = plan_placement(Policy(mode=Mode.auto, group_locality=True, max_moved_slots_fraction=1.0), two_nodes,
                      now=1000.0)
    assert local.decision == Decision.rebalance, local.reason
    assert local.inputs["is_group_local"] and local.inputs["mean_nodes_per_group"] == 1.0
    for layer in local.change.slot_to_expert:  # node n holds slots 10n..10n+9
        for group in range(4):
            nodes = {slot // 10 for slot, expert in enumerate(layer) if expert // 4 == group}
            assert len(nodes) == 1, (group, layer)


def test_a_window_missing_a_ranks_load_has_no_imbalance():
    """A rank that did not report would read as an idle GPU and fake a straggler: hold instead."""
    state = pool()
    partial = {f"{RANK_REPORTS}{rank}": 1 for rank in range(EP - 1)}
    windows = tuple(replace(w, counters=partial) for w in state.windows)
    assert windows[-1].imbalance(EP) is None
    unequal = tuple(replace(w, counters=EVERY_RANK | {f"{RANK_REPORTS}0": 2}) for w in state.windows)
    assert unequal[-1].imbalance(EP) is None  # two instances for rank 0, one for the others
    plan = plan_placement(AUTO, replace(state, windows=windows), now=1000.0)
    assert plan.decision == Decision.hold and "misses" in plan.reason


@pytest.mark.parametrize("num_recent, words", [(60, "actions in the last hour"), (40, "pacing")])
def test_the_planner_holds_a_paced_or_capped_pool(num_recent, words):
    now = 1000.0
    times = [now - 900.0 + 15.0 * i for i in range(num_recent)]
    paced = replace(pool(), last_change_at=times[-1], num_actions_last_hour=num_recent,
                    changes=tuple(KnobChange(i, KnobKind.placement, t, "verified", 0) for i, t in enumerate(times)))
    plan = plan_placement(Policy(mode=Mode.auto, cooldown_seconds=0), paced, now=now)
    assert plan.decision == Decision.hold and words in plan.reason


def test_a_change_is_aimed_at_the_load_over_its_time_in_force():
    # expert 1 heats up 6% a window (a swing towards text it serves): a change in force for the even pace's
    # minute (6 windows of 10 s) meets it hotter than the next window's forecast says
    base = pool()
    windows = []
    for index in range(40):
        load = np.full((NUM_LAYERS, NUM_EXPERTS), 100.0)
        load[:, 1] = 300.0 * 1.06 ** index
        windows.append(loop_window(index, load, PlacementTable(base.slot_to_expert).slot_load(load), num_reports=EP,
                                   counters=EVERY_RANK))
    plan = plan_placement(AUTO, replace(base, windows=tuple(windows)), now=1000.0)
    history = np.stack([w.expert_tokens for w in windows])
    next_window = base.placement.imbalance(forecast_load(history[-MAX_LEVEL_WINDOWS:]), EP)
    assert plan.inputs["forecast_imbalance_current"] > next_window + 0.05, plan.inputs


def test_windows_without_load_are_left_out_of_the_forecast():
    # an SGLang window whose dump did not come (or an idle one) carries no load: it says nothing of which experts run
    base = pool()

    def window(index: int, load: np.ndarray):
        return loop_window(index, load, PlacementTable(base.slot_to_expert).slot_load(load), num_reports=EP,
                           counters=EVERY_RANK)

    loads = []
    for index in range(20):
        load = np.full((NUM_LAYERS, NUM_EXPERTS), 100.0)
        load[:, 1] = 300.0 * 1.06 ** index
        loads.append(load)
    empty = np.zeros((NUM_LAYERS, NUM_EXPERTS))
    with_gaps = [window(i, x) for i, x in enumerate(loads[:10] + [empty] * 6 + loads[10:])]
    without = [window(i, x) for i, x in enumerate(loads)]
    gapped = plan_placement(AUTO, replace(base, windows=tuple(with_gaps)), now=1000.0)
    clean = plan_placement(AUTO, replace(base, windows=tuple(without)), now=1000.0)
    assert gapped.decision == clean.decision == Decision.rebalance, gapped.reason
    assert gapped.inputs["forecast_imbalance_current"] == clean.inputs["forecast_imbalance_current"]
    assert (gapped.change.slot_to_expert == clean.change.slot_to_expert).all()
