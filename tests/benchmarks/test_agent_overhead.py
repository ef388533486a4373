"""benchmarks/agent_overhead.py runs and reports; its 2% budget is the benchmark's to judge, not a test's
(wall-clock ratios on a shared machine)."""

from __future__ import annotations

import math

from benchmarks.agent_overhead import main, measure


def test_the_overhead_benchmark_measures_the_agent_and_reports_against_its_budget(capsys):
    result = measure(num_steps=40, batch_size=2, block=5)
    assert result["step_ms"] > 0 and result["agent_ms"] > 0, result
    assert math.isclose(result["agent_share"], result["agent_mean_ms"] / result["step_ms"], rel_tol=1e-9), result
    code = main(["--steps", "20", "--batch-size", "2"])
    report = capsys.readouterr().out
    assert "engine step" in report and "% of a step" in report, report
    assert (code == 1) == ("over budget" in report), (code, report)
