"""A short run of the closed-loop comparison (benchmarks/closed_loop.py): it runs every strategy on every
workload and reports them; the numbers that matter come from the full run in benchmarks/results/."""

from __future__ import annotations

from agents.sim.workloads import CALIBRATED, STRESS
from benchmarks import closed_loop
from benchmarks.closed_loop import (
    DECODE,
    DECODE_3,
    MOECTL_POLICIES,
    PREFILL,
    WORKLOADS,
    Moectl,
    Oracle,
    Outcome,
    PeriodicEplb,
    Static,
    simulate,
    target_rows,
)


def test_each_strategy_runs_the_same_windows_and_reports():
    hours = 24 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR  # 24 windows
    static = simulate(PREFILL, STRESS[2], Static(), hours)
    eplb = simulate(PREFILL, STRESS[2], PeriodicEplb(PREFILL, 4 * closed_loop.WINDOW_SECONDS), hours)
    name, policy = next(iter(MOECTL_POLICIES.items()))
    loop = simulate(PREFILL, STRESS[2], Moectl(PREFILL, policy, name), hours)
    for outcome in (static, eplb, loop):
        assert len(outcome.imbalances) == 24 and min(outcome.imbalances) >= 1.0 and outcome.seconds > 0
        assert outcome.tokens == static.tokens  # the same workload for all
    # all start from the same table, so the first window is the same for all
    assert static.imbalances[0] == eplb.imbalances[0] == loop.imbalances[0]
    assert (static.moved, static.decisions) == (0, 0)
    assert eplb.decisions == 6 and eplb.moved > 0  # after windows 4, 8, ..., 24
    # the fast-drifting workload leaves the start's placement behind: the loop acts, within its per-change budget
    residencies = PREFILL.num_layers * PREFILL.topology.num_slots
    assert loop.decisions >= 1
    assert loop.moved <= loop.decisions * policy.max_moved_slots_fraction * residencies
    assert sum(loop.imbalances[-8:]) < sum(static.imbalances[-8:])
    row = loop.row(PREFILL, hours, static)
    assert row[0] == name and row[4].endswith("x")


def test_the_report_names_every_strategy_and_workload(capsys):
    assert closed_loop.main(["--hours", str(3 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR), "--eplb-minutes",
                             "0.1", "--pools", "prefill", "decode", "--workloads", "0", str(len(WORKLOADS) - 1),
                             "--split-policies", next(iter(MOECTL_POLICIES)), "--no-write"]) == 0
    out = capsys.readouterr().out
    for name in ("static", Oracle.name, "EPLB every 6 s", *MOECTL_POLICIES, CALIBRATED[0].name, STRESS[-1].name,
                 f"{next(iter(MOECTL_POLICIES))} + split", "step max/mean, split",
                 "prefill EP32", "decode EP320", "moved <= 15% of EPLB's"):
        assert name in out


def test_the_report_runs_only_the_workloads_asked_for(capsys):
    assert closed_loop.main(["--hours", str(2 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR), "--eplb-minutes",
                             "0.1", "--workloads", str(WORKLOADS.index(STRESS[2])), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert STRESS[2].name in out and not any(w.name in out for w in [*CALIBRATED, *STRESS[:2]])


def test_no_strategy_beats_the_oracle_in_any_window():
    """One slot per GPU: the oracle's fresh solve of each window's own load is the best any placement does."""
    hours = 4 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR
    oracle = simulate(DECODE, STRESS[1], Oracle(DECODE), hours)
    static = simulate(DECODE, STRESS[1], Static(), hours)
    assert (oracle.moved, oracle.decisions) == (0, 0) and oracle.tokens == static.tokens
    assert all(o <= s + 1e-9 for o, s in zip(oracle.imbalances, static.imbalances, strict=True))
    assert oracle.throughput >= static.throughput
    row = oracle.row(DECODE, hours, static)
    assert row[0] == Oracle.name and row[5] == row[6] == "-"


def test_three_slots_per_gpu_make_the_decode_pools_balance_feasible():
    """The same windows on EP320: one slot per GPU cannot spread a hot expert thin enough for 1.10, three can."""
    hours = 2 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR
    one = simulate(DECODE, STRESS[0], Oracle(DECODE), hours)
    three = simulate(DECODE_3, STRESS[0], Oracle(DECODE_3), hours)
    assert DECODE_3.topology.num_gpus == DECODE.topology.num_gpus == 320
    assert DECODE_3.topology.num_slots == 3 * DECODE.topology.num_slots
    assert three.tokens == one.tokens
    assert min(one.imbalances) > 2.0 and max(three.imbalances) <= closed_loop.MAX_BALANCED


def outcome(name: str, imbalance: float, seconds: float, moved: int = 0) -> Outcome:
    return Outcome(name, imbalances=[imbalance], tokens=1e6, seconds=seconds, moved=moved)


def test_targets_say_met_infeasible_and_against_which_eplb():
    residencies = PREFILL.num_layers * PREFILL.topology.num_slots
    static, oracle = outcome("static", 4.0, 10.0), outcome(Oracle.name, 1.05, 4.0)
    eplbs = [outcome("EPLB every 1 min", 1.08, 4.5, moved=50 * residencies),
             outcome("EPLB every 2 min", 1.12, 5.0, moved=25 * residencies),
             outcome("EPLB every 10 min", 1.30, 6.0, moved=5 * residencies)]
    loops = [outcome("balanced, frugal", 1.09, 4.6, moved=residencies * 3),
             outcome("behind every EPLB", 1.50, 7.0, moved=residencies // 10)]
    balanced, behind = target_rows(PREFILL, 1.0, static, oracle, eplbs, loops)
    assert balanced[1].startswith("met: 1.090") and "infeasible" not in balanced[1]
    assert balanced[2] == "met: 2.17x; oracle 2.50x"
    # it does not match EPLB every minute (1.08): it is held to the best period it matches, 2 minutes, not 10
    assert balanced[3].startswith("met: 12.0% of EPLB every 2 min")
    assert behind[1].startswith("NOT met: 1.500") and behind[2].startswith("met: 1.43x")
    assert behind[3].startswith("NOT met: every EPLB period balances better")
    mild_static, far_oracle = outcome("static", 1.7, 5.0), outcome(Oracle.name, 2.5, 4.0)
    (row,) = target_rows(PREFILL, 1.0, mild_static, far_oracle, eplbs, loops[:1])
    assert row[1].startswith("n/a (static 1.70 < 2)") and row[1].endswith("oracle 2.500: infeasible")
    assert row[2] == "NOT met: 1.09x; oracle 1.25x: infeasible"


def test_a_pool_routing_by_the_split_is_planned_for_its_steps_and_measured_per_step():
    """The calibrated workload: every strategy's sampled steps are the same; the split never loses to the window's
    shares on them, and the loop for a split pool plans with the step objective."""
    hours = 6 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR
    static = simulate(PREFILL, CALIBRATED[0], Static(), hours)
    name, policy = next(iter(MOECTL_POLICIES.items()))
    split = Moectl(PREFILL, policy.model_copy(update=dict(imbalance_threshold=1.0, sustained_windows=1)),
                   name, is_split=True)
    loop = simulate(PREFILL, CALIBRATED[0], split, hours)
    for outcome in (static, loop):
        assert len(outcome.step_shares) == len(outcome.step_split) == 6
        assert all(b <= sp + 1e-9 <= sh + 2e-9 for b, sp, sh in zip(outcome.step_bound, outcome.step_split,
                                                                   outcome.step_shares, strict=True))
    assert static.step_tokens == loop.step_tokens and static.step_seconds_split <= static.step_seconds_shares
    assert 1.0 < static.imbalance < 2.0  # calibrated: nowhere near the stress cases' skew
    assert split.windows[-1].step_imbalance()["routed"] == 1.0  # what the planner reads to use the step objective
    row = loop.step_row(static)
    assert row[0] == name and row[-1].endswith("x")
