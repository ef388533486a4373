"""A short run of the pool planner benchmark (benchmarks/pools.py): it runs every planner on a trace
and reports them side by side. Speed and the SLO targets (attainment >= static, >= Dynamo-style) are the
benchmark's business, not this test's."""

from __future__ import annotations

from benchmarks.pools import run_trace, table, traces, verdict


def test_a_short_benchmark_reports_every_planner():
    trace = traces(minutes=6, scale=0.5)[2]  # step
    runs = run_trace(trace)
    names = [r.outcome.planner for r in runs]
    assert names == ["static-peak", "dynamo-sla", "dynamo-sla+load", "moectl", "moectl+ceiling",
                     "oracle-step (bound)"]
    for run in runs:
        o = run.outcome
        assert o.num_requests == trace.num_requests and 0.0 <= o.attainment <= 1.0 and o.gpu_hours > 0
    assert runs[0].outcome.num_decisions == 0  # static never changes
    text = table(runs)
    assert all(f"| step | {name} |" in text for name in names)
    for run in runs:  # the count behind each share, in the table and in the verdict's comparisons
        o = run.outcome
        assert o.num_missed == round((1 - o.attainment) * o.num_requests)
        assert f"| step | {o.planner} | {100 * o.attainment:.2f}% | {o.num_missed} |" in text
    static = runs[0].outcome
    lines = verdict(runs).splitlines()
    assert [line.split(":")[0] for line in lines] == ["- step, moectl", "- step, moectl+ceiling"]
    moectl = runs[3].outcome
    assert f"attainment >= static ({moectl.num_missed} vs {static.num_missed} missed) " in lines[0]
