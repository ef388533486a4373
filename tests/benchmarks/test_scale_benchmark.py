"""A short run of the scale benchmark (benchmarks/scale.py): a DeepSeek-V3 decode instance (EP320) against
today's controller and this tree's, each in its own process, with the load generator in this one; it runs
and reports, speed is for benchmarks/results/."""

from __future__ import annotations

import pytest

from benchmarks import scale


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_run_reports_both_controllers_side_by_side(capsys):
    assert scale.main(["--ranks", "320", "--databases", "sqlite", "--windows", "2", "--hour-windows", "3",
                       "--no-write"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| today ") or line.startswith("| new ")]
    assert len(rows) == 2, out
    today, new = rows
    assert "| 320 (v1) |" in today and "| 1 (v2) |" in new  # one post per GPU vs one per EP group
    assert "320/320" in today and "320/320" in new  # every agent fresh at the end
    assert "3 windows in" in new and "ingest today / new" in out
    assert "CONTROLLER EXITED" not in out
    head = next(line for line in out.splitlines() if line.startswith("| code "))
    refused = [c.strip() for c in head.split("|")].index("posts refused")
    assert [[c.strip() for c in row.split("|")][refused] for row in rows] == ["0", "0"]  # none stale or malformed
