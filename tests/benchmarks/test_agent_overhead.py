"""The agent costs at most 2% of an engine step (DESIGN.md: it must never slow serving)."""

from __future__ import annotations

from agents.overhead import measure


def test_agent_work_is_under_two_percent_of_a_step():
    result = measure(num_steps=120, batch_size=8)
    assert result["agent_share"] < 0.02, result
