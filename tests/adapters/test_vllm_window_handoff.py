"""The worker's reader thread (agents/adapters/vllm/window_handoff.py): a state directory it cannot write is
counted and logged once, not at every period, and the counts reach the directory whole once it can write again."""

from __future__ import annotations

import json
import logging
import time

import torch

from agents.adapters.faults import Faults
from agents.adapters.vllm.expert_counts import ExpertCounter
from agents.adapters.vllm.window_handoff import start_reader


def test_a_directory_it_cannot_write_is_logged_once_and_the_counts_arrive_whole_after(tmp_path, caplog):
    """Old code: `log.exception` at every period (five a second at 0.2 s) while the directory was a file."""
    blocked = tmp_path / "state"
    blocked.write_text("not a directory")  # the state directory replaced by a file
    counter = ExpertCounter()
    counter.register_layer(1)
    counter.add(1, 4, torch.tensor([[0, 1], [1, 2]]))
    faults = Faults(logging.getLogger("moectl.adapter.vllm"))
    with caplog.at_level(logging.ERROR):
        start_reader(counter, blocked, seconds=0.02, version="0.32.0", faults=faults)
        deadline = time.monotonic() + 30
        while faults.total < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert faults.total >= 10 and len(caplog.records) == 1, caplog.text  # counted each time, logged once
    counter.add(1, 4, torch.tensor([[3, 1]]))
    blocked.unlink()  # repaired: the next write lands, with every count since the start
    deadline = time.monotonic() + 30
    while not list(blocked.glob("counts-*.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    (written,) = blocked.glob("counts-*.json")
    record = json.loads(written.read_text())
    assert record["layers"] == [1] and record["counts"][0][:4] == [1, 3, 1, 1]
