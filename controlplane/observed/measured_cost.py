"""What a pool's placement changes cost as its agents measured them, folded window by window. Pure.

Agents time what their engine's balancer takes from serving (agents/protocol/snapshot.py `balancer_stall_seconds`
with the `balancer_events` it covers): the bundled runtime times each rank's placement switch (no step runs while
its expert weights move). A window's counters carry the sums over its ranks (`balancer_stall_seconds`,
`balancer_stall_events`, controlplane/collect/aggregate.py). The loop folds the windows it has not seen into the
pool's stored measure (controlplane/store/change_costs.py), which outlives the windows it came from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.observed.window import Window

STALL_SECONDS, STALL_EVENTS = "balancer_stall_seconds", "balancer_stall_events"


@dataclass(frozen=True)
class MeasuredCost:
    """A pool's changes as measured: `num_measured` timed acts (a rank's switch each, on the bundled runtime), their
    mean and the newest window's seconds per act, folded in up to window `last_window_index`."""

    num_measured: int
    mean_seconds: float
    last_seconds: float
    last_window_index: int

    def to_json(self) -> dict:
        return {"num_measured": self.num_measured, "mean_seconds": round(self.mean_seconds, 4),
                "last_seconds": round(self.last_seconds, 4)}


def fold_windows(stored: MeasuredCost | None, windows: Iterable[Window]) -> MeasuredCost | None:
    """`stored` with the timed acts of the windows after its last_window_index added (a running mean)."""
    measured = stored
    for w in windows:
        events, seconds = w.counters.get(STALL_EVENTS, 0.0), w.counters.get(STALL_SECONDS, 0.0)
        if events <= 0 or (measured is not None and w.index <= measured.last_window_index):
            continue
        n = 0 if measured is None else measured.num_measured
        mean = 0.0 if measured is None else measured.mean_seconds
        total = n + int(events)
        measured = MeasuredCost(total, (mean * n + seconds) / total, seconds / events, w.index)
    return measured
