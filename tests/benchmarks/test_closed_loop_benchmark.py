"""A short run of the closed-loop comparison (benchmarks/closed_loop.py): it runs every strategy on every
workload and reports them; the numbers that matter come from the full run in benchmarks/results/."""

from __future__ import annotations

from benchmarks import closed_loop
from benchmarks.closed_loop import MOECTL_POLICIES, PREFILL, WORKLOADS, Moectl, PeriodicEplb, Static, simulate


def test_each_strategy_runs_the_same_windows_and_reports():
    hours = 24 * closed_loop.WINDOW_SECONDS / closed_loop.HOUR  # 24 windows
    static = simulate(PREFILL, WORKLOADS[2], Static(), hours)
    eplb = simulate(PREFILL, WORKLOADS[2], PeriodicEplb(PREFILL, 4 * closed_loop.WINDOW_SECONDS), hours)
    name, policy = next(iter(MOECTL_POLICIES.items()))
    loop = simulate(PREFILL, WORKLOADS[2], Moectl(PREFILL, policy, name), hours)
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
                             "0.1", "--pools", "prefill", "decode", "--no-write"]) == 0
    out = capsys.readouterr().out
    for name in ("static", "EPLB every 0 min", *MOECTL_POLICIES, *(w.name for w in WORKLOADS), "prefill EP32",
                 "decode EP320"):
        assert name in out
