"""Load windows: every report of a pool for one window summed into one row."""

from __future__ import annotations

import functools

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from controlplane.observed.report import Report, merge_counters
from controlplane.observed.window import RANK_REPORTS, Window
from controlplane.store.arrays import pack, unpack
from controlplane.store.batches import delete_some
from controlplane.store.decoded import WRITTEN, unpack_for
from controlplane.store.observed_tables import LoadWindow
from controlplane.store.tables import Pool


class WindowOverflow(ValueError):
    """A report would carry a window's token sum past what int64 holds: it is refused, never stored wrapped.
    (The wire bounds each count at 2^40, so this takes 2^23 reports of one window.)"""


def add_report(session: Session, *, pool: Pool, report: Report, current_version: int, grid_seconds: float,
               empty: tuple[np.ndarray, np.ndarray]) -> None:
    """Adds one post's report (a rank's, or an EP group's). A rank's slot load counts only when it ran the
    window's placement, so a window's per-GPU load never mixes two placements. Raises WindowOverflow (nothing
    is added). empty: zero arrays of the window's shapes (`deployments.zeros_for`).

    The window's first report inserts its row, written without reading blobs back. Another post may have
    inserted it meanwhile (the instances of a pool post at once). Then the insert does nothing once that post
    committed, and this report is added to its row: no post has to start over."""
    key = (LoadWindow.pool_id == pool.id, LoadWindow.window_index == report.window_index)
    row = session.scalar(select(LoadWindow).where(*key).with_for_update())
    if row is None:
        values = {"pool_id": pool.id, "window_index": report.window_index,
                  "window_start": report.window_index * grid_seconds, "window_seconds": grid_seconds,
                  "placement_version": current_version, "num_reports": 0, "num_slot_reports": 0, "counters": {}}
        written = _add(values, report, *empty)
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        if session.scalar(insert(LoadWindow).values(**values).on_conflict_do_nothing(
                index_elements=["pool_id", "window_index"]).returning(LoadWindow.id)) is not None:
            _keep(session, (pool.id, report.window_index), written)
            return
        row = session.scalar(select(LoadWindow).where(*key).with_for_update())
    values = {"placement_version": row.placement_version, "num_reports": row.num_reports,
              "num_slot_reports": row.num_slot_reports, "counters": row.counters}
    decode = _unpack_written(session, (pool.id, report.window_index))
    slot_tokens = decode(row.slot_tokens)
    written = _add(values, report, decode(row.expert_tokens), slot_tokens)
    written.setdefault(values.get("slot_tokens", row.slot_tokens), slot_tokens)  # unchanged: the row's, kept too
    for name, value in values.items():
        setattr(row, name, value)
    session.flush()
    _keep(session, (pool.id, report.window_index), written)


def _unpack_written(session: Session, key: tuple[int, int]):  # noqa: ANN202 (Callable[[bytes], np.ndarray])
    """Writable arrays of the row's blobs: those this process wrote last, where the row still holds them."""
    written = session.info.get(WRITTEN)
    return functools.partial(written.unpack, key) if written is not None else (lambda blob: unpack(blob).copy())


def _keep(session: Session, key: tuple[int, int], written: dict[bytes, np.ndarray]) -> None:
    # kept once the statement ran: a post that rolls back later leaves bytes no row holds, never looked up
    if session.info.get(WRITTEN) is not None:
        session.info[WRITTEN].keep(key, written)


def _add(window: dict, report: Report, expert_tokens: np.ndarray, slot_tokens: np.ndarray) -> dict[bytes, np.ndarray]:
    """Adds `report` to a window's values (placement_version, num_reports, num_slot_reports, counters) and
    sums (expert_tokens, slot_tokens: writable, the latter changed in place), setting the blobs that changed.
    Returns each blob set -> the array it holds."""
    expert_tokens = _checked_sum("expert_tokens", report.window_index, expert_tokens, report.expert_tokens)
    window["expert_tokens"] = pack(expert_tokens)
    written = {window["expert_tokens"]: expert_tokens}
    window["num_reports"] += len(report.rank_versions)
    window["counters"] = merge_counters(window["counters"], report.counters)
    counted = np.flatnonzero(np.asarray(report.rank_versions) == window["placement_version"])
    if len(counted):
        width = report.slots_per_rank
        columns = (counted[:, None] * width + np.arange(width)).ravel()  # the counted ranks' slots in the report
        into = report.slot_offset + columns  # and in the window
        slot_tokens[:, into] = _checked_sum("slot_tokens", report.window_index, slot_tokens[:, into],
                                            report.slot_tokens[:, columns])
        window["num_slot_reports"] += len(counted)
        window["counters"] = merge_counters(window["counters"],
                                            {f"{RANK_REPORTS}{report.first_rank + i}": 1 for i in counted.tolist()})
    if len(counted) or window["num_reports"] == len(report.rank_versions):  # changed, or the window's first
        window["slot_tokens"] = pack(slot_tokens)
        written[window["slot_tokens"]] = slot_tokens
    return written


def _checked_sum(name: str, window_index: int, total: np.ndarray, part: np.ndarray) -> np.ndarray:
    if total.dtype.kind == "i" and part.dtype.kind in "iu" and \
            (part > np.iinfo(np.int64).max - total).any():
        raise WindowOverflow(f"{name} of window {window_index} would sum past 2^63 tokens: the report is refused")
    return total + part


def recent(session: Session, pool: Pool, *, before_index: int, limit: int) -> list[Window]:
    """Up to `limit` windows with index < before_index (i.e. complete), oldest first."""
    rows = list(session.scalars(select(LoadWindow).where(LoadWindow.pool_id == pool.id,
                                                         LoadWindow.window_index < before_index)
                                .order_by(LoadWindow.window_index.desc()).limit(limit)))
    decode = unpack_for(session)  # read-only arrays, most of them decoded by an earlier read
    return [Window(index=r.window_index, start=r.window_start, seconds=r.window_seconds,
                   placement_version=r.placement_version, num_reports=r.num_reports,
                   num_slot_reports=r.num_slot_reports, expert_tokens=decode(r.expert_tokens),
                   slot_tokens=decode(r.slot_tokens), counters=dict(r.counters)) for r in reversed(rows)]


def prune(session: Session, pool: Pool, *, history_windows: int, limit: int) -> int:
    """Deletes (at most `limit` of) the pool's windows older than the newest `history_windows` complete ones
    the planner and the views read, and the two still filling (the current one, and the one that ended less
    than half a window ago). Returns how many went."""
    newest = session.scalar(select(func.max(LoadWindow.window_index)).where(LoadWindow.pool_id == pool.id))
    if newest is None:
        return 0
    return delete_some(session, LoadWindow, LoadWindow.pool_id == pool.id,
                       LoadWindow.window_index <= newest - (history_windows + 2), limit=limit)
