"""A short run of the scale benchmark (benchmarks/scale.py): a DeepSeek-V3 decode instance (EP320) against
today's controller and this tree's, each as two API processes on one port (one runs the loop), with the load
generator in this one, posting as the agents' posters do; it runs and reports, speed is for benchmarks/results/."""

from __future__ import annotations

import pytest

from benchmarks import scale


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_run_reports_both_controllers_side_by_side(capsys):
    assert scale.main(["--ranks", "320", "--databases", "sqlite", "--windows", "2", "--hour-windows", "3",
                       "--api-processes", "2", "--posts", "spread", "--no-write"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first_table = lines[lines.index(next(line for line in lines if line.startswith("| code "))):]
    first_table = first_table[:first_table.index("")]
    rows = [line for line in first_table if line.startswith("| today ") or line.startswith("| new ")]
    assert len(rows) == 2, out
    today, new = rows
    assert "| 1 (v2, spread) |" in today and "| 1 (v2, spread) |" in new  # one post per EP group, as agents send
    assert "| 2 |" in today and "| 2 |" in new  # API processes
    assert "320/320" in today and "320/320" in new  # every agent fresh at the end
    assert "3 windows in" in today and "3 windows in" in new and "ingest today / new" in out
    assert "RSS MB by 60 windows" in out
    assert "CONTROLLER EXITED" not in out
    head = next(line for line in out.splitlines() if line.startswith("| code "))
    refused = [c.strip() for c in head.split("|")].index("posts refused")
    assert [[c.strip() for c in row.split("|")][refused] for row in rows] == ["0", "0"]  # none stale or malformed
    pauses = [c.strip() for c in head.split("|")].index("GC pauses > 5 ms: count, longest ms")
    assert all(int(c.split(",")[0]) >= 0 for c in ([c.strip() for c in row.split("|")][pauses] for row in rows))
