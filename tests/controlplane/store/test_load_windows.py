"""Load windows: every rank's report of a window summed into one row, slot load only under one placement."""

from __future__ import annotations

import threading
import time

import numpy as np
from support.store import SLOTS_PER_RANK, make_pool, snapshot

from controlplane.collect.aggregate import to_report
from controlplane.observed.window import RANK_REPORTS
from controlplane.store import deployments, windows
from controlplane.store.db import make_sessions

NOW = 1_800_000_000.0


def add(session, deployment, pool, *, start: float, rank: int, version: int = 0, current: int = 0, seed: int = 1):
    s = snapshot(window_start=start, rank=rank, placement_version=version, seed=seed, forward_seconds=2.0)
    windows.add_report(session, pool=pool, report=to_report(s, 10.0),
                       current_version=current, grid_seconds=10.0, empty=deployments.zeros_for(deployment, pool))
    return s


def test_ranks_sum_into_one_window_and_slot_load_lands_at_each_ranks_slots(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        a = add(session, deployment, pool, start=NOW, rank=0, seed=1)
        b = add(session, deployment, pool, start=NOW + 0.4, rank=1, seed=2)  # a little late: the same window
        [window] = windows.recent(session, pool, before_index=10**9, limit=5)
    np.testing.assert_array_equal(window.expert_tokens, a.expert_tokens.to_numpy() + b.expert_tokens.to_numpy())
    np.testing.assert_array_equal(window.slot_tokens[:, :SLOTS_PER_RANK], a.slot_tokens.to_numpy())
    np.testing.assert_array_equal(window.slot_tokens[:, SLOTS_PER_RANK:], b.slot_tokens.to_numpy())
    assert (window.num_reports, window.num_slot_reports, window.counters["forward_seconds"]) == (2, 2, 4.0)
    assert window.counters[f"{RANK_REPORTS}0"] == window.counters[f"{RANK_REPORTS}1"] == 1


def test_a_rank_on_another_placement_adds_its_expert_load_but_not_its_slot_load(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        add(session, deployment, pool, start=NOW, rank=0, version=1, current=1)
        late = add(session, deployment, pool, start=NOW, rank=1, version=0, current=1)  # has not switched yet
        [window] = windows.recent(session, pool, before_index=10**9, limit=5)
    assert window.placement_version == 1 and (window.num_reports, window.num_slot_reports) == (2, 1)
    assert not window.slot_tokens[:, SLOTS_PER_RANK:].any()
    assert window.expert_tokens.sum() > late.expert_tokens.to_numpy().sum()
    assert window.imbalance(2) is None  # rank 1's GPU would read as idle


def test_recent_returns_complete_windows_oldest_first_and_prune_drops_old_ones(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        for i in range(5):
            add(session, deployment, pool, start=NOW + 10 * i, rank=0)
        first = int(NOW // 10)
        assert [w.index for w in windows.recent(session, pool, before_index=first + 4, limit=3)] == [
            first + 1, first + 2, first + 3]
        # one complete window of history, and the two still filling
        assert windows.prune(session, pool, history_windows=1, limit=100) == 2
        assert [w.index for w in windows.recent(session, pool, before_index=first + 9, limit=9)] == [
            first + 2, first + 3, first + 4]


def test_a_report_to_a_window_another_post_is_opening_waits_for_it_and_adds_to_its_row(sessions):
    """Instances of a pool post a window at once: one inserts its row, the others add to that row once it is
    committed, none has to start its post over."""
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
    opened, errors = threading.Event(), []
    first = sessions()
    first.begin()
    a = add(first, deployment, first.get(type(pool), pool.id), start=NOW, rank=0, seed=1)  # not committed yet

    def second_post():
        try:
            with sessions() as session, session.begin():
                opened.set()
                add(session, deployment, session.get(type(pool), pool.id), start=NOW, rank=1, seed=2)
        except Exception as exc:  # noqa: BLE001 (the assertion below names it)
            errors.append(exc)

    thread = threading.Thread(target=second_post)
    thread.start()
    opened.wait()
    time.sleep(0.3)  # the second post is waiting on the first's row (PostgreSQL) or write lock (SQLite)
    first.commit()
    first.close()
    thread.join(timeout=30)
    assert errors == []
    with sessions() as session:
        [window] = windows.recent(session, session.get(type(pool), pool.id), before_index=10**9, limit=5)
    assert (window.num_reports, window.num_slot_reports) == (2, 2)
    np.testing.assert_array_equal(window.slot_tokens[:, :SLOTS_PER_RANK], a.slot_tokens.to_numpy())


def test_posts_of_two_processes_alternating_on_one_window_sum_exactly(sessions):
    """Each API process keeps the arrays it wrote last (store/decoded.py WrittenArrays) and skips decoding
    them when the row still holds its bytes; a row the other process wrote meanwhile is decoded, not mistaken
    for its own. Two sessionmakers are two processes' caches."""
    other = make_sessions(sessions.kw["bind"])
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
    posted = []
    for rank, maker in enumerate([sessions, sessions, other, sessions, other, other]):
        with maker() as session, session.begin():
            posted.append(add(session, deployment, session.get(type(pool), pool.id), start=NOW, rank=rank % 2,
                              seed=rank + 1))
    with sessions() as session:
        [window] = windows.recent(session, pool, before_index=10**9, limit=5)
    np.testing.assert_array_equal(window.expert_tokens, sum(s.expert_tokens.to_numpy() for s in posted))
    for rank in (0, 1):
        np.testing.assert_array_equal(window.slot_tokens[:, rank * SLOTS_PER_RANK:(rank + 1) * SLOTS_PER_RANK],
                                      sum(s.slot_tokens.to_numpy() for s in posted[rank::2]))
    assert (window.num_reports, window.num_slot_reports, window.counters["forward_seconds"]) == (6, 6, 12.0)
