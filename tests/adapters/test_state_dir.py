"""The state directory (agents/adapters/state_dir.py, private_files.py) as a hostile operator and racing writers
meet it: whole files under concurrent writers and readers, a read-modify-write that loses no entry, a default
that is ours and not under /tmp, planted links and files refused, an older engine life's entries cleared, and
unreadable files read as absent (counted, logged once)."""

from __future__ import annotations

import json
import logging
import os
import threading

import numpy as np
import pytest

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement, in_force
from agents.adapters.epoch import EPOCH_ENV, engine_epoch, epoch_order, new_epoch
from agents.adapters.faults import Faults
from agents.adapters.private_files import NotOurs, private_dir, read_ours, write_atomic

OLD, NEW = "1700000000000000.abc.7", "1700000100000000.abc.9"


def _record(call: int, epoch: str = OLD, model: str = "2x8") -> dict:
    return {"epoch": epoch, "model": model, "call": call, "at": 1.0, "weight": np.ones((2, 8), dtype=int).tolist(),
            "current": None, "num_replicas": 10, "num_ranks": 2, "vllm": "0.34.0"}


def _armed(version: int, epoch: str = OLD, from_call: int = 2) -> ArmedPlacement:
    return ArmedPlacement(version, from_call, np.tile(np.r_[np.arange(8), [0, 1]], (2, 1)), epoch, "2x8")


def test_concurrent_writers_and_a_reader_never_see_a_torn_file(tmp_path):
    """Old code: every thread used the same temp name; a reader saw torn JSON on ~1/3 of its reads."""
    stop, torn, errors = threading.Event(), [], []
    big = [_armed(v) for v in range(1, 5)]

    def writer() -> None:
        try:
            while not stop.is_set():
                state.write_armed(tmp_path, big)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(300):
        try:
            json.loads(read_ours(tmp_path / "placements.json"))
        except FileNotFoundError:
            continue
        except ValueError as exc:
            torn.append(exc)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors and not torn
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind


def test_concurrent_arming_loses_no_entry(tmp_path):
    """Old code: the endpoint's read-modify-write held no lock, so two posts could drop each other's entry."""
    threads = [threading.Thread(target=state.arm, args=(tmp_path, _armed(v))) for v in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.version for a in state.read_armed(tmp_path)) == [1, 2, 3, 4]


def test_a_planted_link_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    directory = private_dir(tmp_path / "state")
    (directory / "placements.json").symlink_to(victim)
    assert state.read_armed(directory, faults=Faults(logging.getLogger("t"))) == []  # a link is not read
    state.write_armed(directory, [_armed(1)])
    assert victim.read_text() == "keep me" and not (directory / "placements.json").is_symlink()


def test_the_default_is_ours_not_under_tmp_and_created_0700(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = state.default_dir("vllm")
    assert not str(default).startswith("/tmp/moectl")
    state.write_load(default, _record(0))
    assert default.stat().st_mode & 0o777 == 0o700


def test_a_directory_writable_by_others_or_someone_elses_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(NotOurs, match="writable by others"):
        state.write_load(shared, _record(0))
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, 4242)
    with pytest.raises(NotOurs, match="owned by uid 4242"):
        state.write_load(theirs, _record(0))


def test_a_planted_file_of_someone_else_is_not_trusted(tmp_path):
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    state.write_armed(tmp_path, [_armed(1)])
    os.chown(tmp_path / "placements.json", 4242, 4242)
    faults = Faults(logging.getLogger("t"))
    assert state.read_armed(tmp_path, faults=faults) == [] and faults.total == 1


def test_a_torn_or_ragged_file_reads_as_absent_counted_and_logged_once(tmp_path, caplog):
    faults = Faults(logging.getLogger("moectl.test"))
    state.write_load(tmp_path, _record(0))
    (tmp_path / "placements.json").write_text('[{"version": 1, "from_c')
    (tmp_path / f"load-{OLD}-2x8-00000001.json").write_text('{"epoch": "')
    with caplog.at_level(logging.ERROR, "moectl.test"):
        for _ in range(3):
            assert state.read_armed(tmp_path, faults=faults) == []
            assert [r["call"] for r in state.read_loads(tmp_path, faults=faults)] == [0]
    assert faults.snapshot() == {"unreadable placements.json": 3, "unreadable load": 3}
    assert len(caplog.records) == 2  # once per cause
    ragged = [{"version": 1, "from_call": 2, "epoch": OLD, "model": "2x8", "table": [[0, 1], [0]]},
              {"version": 2, "from_call": 2, "epoch": OLD, "model": "2x8"}]  # a field missing
    (tmp_path / "placements.json").write_text(json.dumps(ragged))
    assert state.read_armed(tmp_path, faults=faults) == []
    assert faults.snapshot()["unreadable placement entry"] == 2


def test_a_new_epoch_clears_the_older_ones_entries_and_is_never_pruned_by_them(tmp_path):
    """Old code: pruning sorted by file name, so a new process's call 0 was pruned behind the old one's call 100;
    and a placement armed for the old life's call 4 applied again in the new one."""
    for call in range(60, 70):
        state.write_load(tmp_path, _record(call, OLD))
    state.write_armed(tmp_path, [_armed(1, OLD, from_call=4)])
    assert in_force(state.read_armed(tmp_path), 5, epoch=NEW, model="2x8") is None  # not in the new life
    state.write_load(tmp_path, _record(0, NEW))
    assert [(r["epoch"], r["call"]) for r in state.read_loads(tmp_path)] == [(NEW, 0)]
    assert state.read_armed(tmp_path) == []  # the old life's placement is gone
    assert [r["call"] for r in state.read_loads(tmp_path, (OLD, 69))] == [0]  # a newer epoch is after any call


def test_records_are_kept_and_read_by_model_and_position(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "MAX_LOADS", 3)
    for call in range(5):
        state.write_load(tmp_path, _record(call, NEW, "2x8"))
        state.write_load(tmp_path, _record(call, NEW, "1x8"))  # an MTP drafter's, interleaved
    assert [r["call"] for r in state.read_loads(tmp_path, model="2x8")] == [2, 3, 4]
    assert [r["call"] for r in state.read_loads(tmp_path, (NEW, 2), model="1x8")] == [3, 4]
    assert [r["call"] for r in state.read_loads(tmp_path, model="2x8", max_records=1)] == [4]
    assert {m: r["call"] for m, r in state.read_newest(tmp_path).items()} == {"2x8": 4, "1x8": 4}


def test_engine_epoch_is_inherited_by_the_engines_processes_and_sorts_by_start(monkeypatch):
    monkeypatch.delenv(EPOCH_ENV, raising=False)
    first = engine_epoch()
    assert engine_epoch() == first == os.environ[EPOCH_ENV]  # workers started after the entry point inherit it
    assert epoch_order(new_epoch(now=2e9)) > epoch_order(first)


def test_a_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    state.write_armed(tmp_path, [_armed(1)])

    def full(fd, data):  # noqa: ANN001
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "placements.json", b"[]")
    monkeypatch.undo()
    assert [a.version for a in state.read_armed(tmp_path)] == [1]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
