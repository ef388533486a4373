"""The SGLang sidecar stays up through ordinary faults (agents/adapters/sglang/sidecar.py, dump_files.py,
placement_store.py, restart.py): the server not up yet or answering an HTML page, a truncated dump, a dump named
`..._inf.pt`, a link in the dump directory, an empty store after a crash, a restart command missing or hanging, a
refused store write, and, live, an SGLang restart after which the controller's placement is armed again. The server
is tests/support/engines/recorded_sglang.py (SGLang's own outputs replayed), as in test_sglang_sidecar.py."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import torch
from test_sglang_sidecar import INFO, _answer, _good, _record, _sidecar

from agents.adapters import state_dir
from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang import sidecar as sglang_sidecar
from agents.adapters.sglang.dump_files import take_new_dump
from agents.adapters.sglang.placement_store import META_FILE, PLACEMENT_FILE, DirectoryStore
from agents.adapters.sglang.restart import CommandRestart

NEW = "1700000100000000.abc.9"


def _dump(path, value: int = 1) -> None:  # noqa: ANN001
    torch.save({"rank": 0, "logical_count": torch.full((2, 5, 16), value, dtype=torch.int32),
                "average_utilization_rate_over_window": None}, path)


def test_live_an_sglang_restart_re_arms_the_controllers_placement(tmp_path):
    """Old code: the placement armed in SGLang's previous life was the only one, for a call number of that life."""
    live = tmp_path / "live"
    sidecar, _, _, _, _ = _sidecar(tmp_path, [], info=INFO | {"enable_eplb": True}, live_dir=live)
    weight = np.ones((5, 16), dtype=np.int64)
    weight[0] = 0  # layer 0 is dense
    state_dir.write_load(live, _record(0, weight))
    sidecar.begin()
    sidecar.on_answer(_answer(3, _good(5)))
    assert sidecar.apply_answers().version == 3
    for call in (1, 2):
        state_dir.write_load(live, _record(call, weight))
    sidecar.close_window(1_800_000_000.0)
    assert sidecar.running.version == 3
    state_dir.write_load(live, _record(0, weight) | {"epoch": NEW, "faults": {"placement v9 refused": 1}})
    snapshot = sidecar.close_window(1_800_000_010.0)  # SGLang restarted
    assert sidecar.running.version == 0 and sidecar.faults.snapshot()["engine restarted"] == 1
    # and no truncated-buffer warning: live, each row is a whole rebalance (old code: warned every window)
    assert snapshot.adapter_faults == {"engine restarted": 1, "plugin: placement v9 refused": 1}
    assert sidecar.apply_answers().version == 3  # no new answer: armed again for the new life
    (armed,) = state_dir.read_armed(live)
    assert (armed.epoch, armed.from_call) == (NEW, 2)
    assert sidecar.apply_answers() is None  # once a life


class _Starting:
    """SGLang loading: its port refuses, then its proxy answers an HTML page with 200, then SGLang answers."""

    def __init__(self, server):  # noqa: ANN001
        self.server, self.num_calls = server, 0

    def __call__(self) -> dict:
        self.num_calls += 1
        if self.num_calls == 1:
            raise OSError(111, "Connection refused")
        if self.num_calls == 2:
            raise ValueError("Expecting value: line 1 column 1 (char 0)")  # httpx's .json() of an HTML page
        return self.server.info


def test_run_waits_for_the_server_with_back_off_and_survives_a_refused_store(tmp_path, monkeypatch):
    """Old code: `begin` raised out of run() (a crash loop while SGLang loads), and so did a refused write."""
    monkeypatch.setattr(sglang_sidecar, "MAX_BEGIN_WAIT_SECONDS", 0.2)
    sidecar, server, _, _, clock = _sidecar(tmp_path, [np.zeros((8, 5, 16))] * 50, min_restart_seconds=0)
    clock.now = time.time()
    server.server_info = _Starting(server)

    def refused(placement):  # noqa: ANN001 (a ConfigMap write refused: the Kubernetes client's own exception)
        raise RuntimeError("(403) Forbidden: configmaps is forbidden")

    sidecar.store.write = refused
    sidecar.window_seconds = 0.2
    sidecar.on_answer(_answer(1, _good(1)))
    stopping = threading.Event()
    thread = threading.Thread(target=sidecar.run, args=(stopping,))
    thread.start()
    deadline = time.time() + 20
    while "placement not applied" not in sidecar.faults.snapshot() and time.time() < deadline:
        time.sleep(0.05)
        clock.now = time.time()
    stopping.set()
    thread.join(10)
    assert not thread.is_alive()
    assert sidecar.faults.snapshot()["engine not answering"] == 2 and "placement not applied" in sidecar.faults.counts


def test_an_empty_store_after_a_crash_reads_as_none(tmp_path):
    """Old code: an empty placement.meta.json raised at every start (a crash loop)."""
    store = DirectoryStore(tmp_path)
    (tmp_path / PLACEMENT_FILE).write_text('{"physical_to_logical_map": [[0]]}')
    (tmp_path / META_FILE).write_text("")
    assert store.read() is None
    sidecar, _, _, _, _ = _sidecar(tmp_path, [np.zeros((8, 5, 16))])
    (tmp_path / "placement").mkdir()
    (tmp_path / "placement" / PLACEMENT_FILE).write_text("")
    (tmp_path / "placement" / META_FILE).write_text("{")
    sidecar.begin()
    assert sidecar.running.version == 0


def test_a_restart_command_missing_or_hanging_is_a_restart_not_done(tmp_path):
    assert CommandRestart(["/nonexistent/restart-sglang"]).restart() is False
    started = time.monotonic()
    assert CommandRestart(["sleep", "30"], timeout_seconds=0.5).restart() is False
    assert time.monotonic() - started < 20


def test_dump_names_are_checked_links_not_followed_truncated_refused(tmp_path):
    """Old code: `..._inf.pt` sorted newest and the real dump was deleted unread; links were followed."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    _dump(dumps / "expert_distribution_recorder_inf.pt", 9)
    _dump(dumps / "expert_distribution_recorder_nan.pt", 9)
    outside = tmp_path / "elsewhere.pt"
    _dump(outside, 7)
    (dumps / "expert_distribution_recorder_1900000000.0.pt").symlink_to(outside)
    _dump(dumps / "expert_distribution_recorder_1800000000.5.pt", 1)
    got = take_new_dump(dumps, after=0, timeout=0)
    assert int(got["logical_count"].max()) == 1  # the real one
    assert outside.exists() and (dumps / "expert_distribution_recorder_inf.pt").exists()
    (dumps / "expert_distribution_recorder_1800000001.0.pt").write_bytes(b"PK\x03\x04truncated")
    with pytest.raises(EngineFormatError, match="cannot be loaded"):
        take_new_dump(dumps, after=0, timeout=0)
    assert not (dumps / "expert_distribution_recorder_1800000001.0.pt").exists()


def test_a_truncated_buffer_is_warned_once_and_counted_every_window(tmp_path, caplog):
    full = np.ones((64, 5, 16))  # every one of the recorder's 64 rows written since the last dump
    full[:, 0] = 0  # layer 0 is dense
    sidecar, _, posted, _, _ = _sidecar(tmp_path, [full] * 4)
    sidecar.begin()
    with caplog.at_level(logging.WARNING, "moectl.adapter.sglang"):
        for window in range(3):
            sidecar.close_window(1_800_000_000.0 + 10 * window)
    assert len(posted) == 3 and sidecar.faults.snapshot()["recorder buffer truncated"] == 3
    assert sum("overwritten" in r.getMessage() for r in caplog.records) == 1

