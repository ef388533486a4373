"""Is the engine's own balancer still acting? Pure: a pool's windows in, a verdict with its evidence out.

An engine's balancer can stop while the engine serves and its `/health` answers 200: a vLLM async EPLB that
silently stopped rearranging was such a case. Nothing fails, the placement just freezes on a load that moves on.
Two watches, by engine:

- `vllm`, `sglang` (and any engine whose agents count its balancer's acts, `balancer_events` in a snapshot's rank
  counters, agents/protocol/snapshot.py): the acts stop arriving. vLLM's acts are its EPLB rearranges; SGLang's
  are its expert-distribution dumps, which its sidecar reads every window (agents/adapters/sglang/sidecar.py; live,
  the rebalances SGLang's EPLB recorded). When a dump does not come the sidecar still posts the window, with the
  engine's serving counters from its /metrics, 0 dumps and no tokens counted, so a stalled recorder shows here and
  not as a stale agent. The interval is measured on the windows where acts arrived (the median gap between them);
  the balancer has stalled when the windows that served traffic since the last act add up to more than
  `max_silent_intervals` intervals (and at least `MIN_SILENT_WINDOWS` windows). Idle windows do not count: vLLM
  rearranges every N steps and SGLang's recorder counts forward passes, and an idle engine takes none. A window
  served traffic when its routers counted tokens, or its ranks stepped, ran requests or answered them (TTFT/ITL
  observations from the engine's /metrics: what shows serving when the load is missing).
- `bundled`: moectl's runtime switches a placement at a step the EP group agrees on, live, when told. It has
  stalled when, `SETTLE_WINDOWS` after the controller issued a placement version, `max_silent_intervals` windows
  that served traffic had ranks still running an older one, the newest among them.

A pool whose agents do not report the balancer (agents before the field) is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window

MAX_SILENT_INTERVALS = 3  # the balancer's intervals without an act, while serving, before it counts as stalled
MIN_SILENT_WINDOWS = 2  # and at least this many windows: one window without an act can be its timing
SETTLE_WINDOWS = 1  # the bundled agents take a placement with their next post's answer: the window after may be old
EVENTS, REPORTS = "balancer_events", "balancer_reports"  # window counters (controlplane/collect/aggregate.py)
# what an engine's counted acts are; another engine that counts them: its rearranges
ENGINE_TO_ACTS = {"vllm": "rearranges", "sglang": "dumps"}


@dataclass(frozen=True)
class BalancerWatch:
    """The verdict on a pool's balancer. watched: what was watched ("rearranges", "switches"; None: nothing);
    interval_seconds: the balancer's measured interval (rearranges, dumps); silent_seconds: serving seconds since its
    last act (rearranges, dumps) or since the version was issued (switches)."""

    deployment: str
    role: str
    engine: str
    watched: str | None
    is_stalled: bool
    reason: str
    interval_seconds: float | None = None
    silent_seconds: float | None = None
    num_silent_windows: int = 0

    def evidence(self) -> dict:
        return {"engine": self.engine, "watched": self.watched,
                "interval_seconds": None if self.interval_seconds is None else round(self.interval_seconds, 1),
                "silent_seconds": None if self.silent_seconds is None else round(self.silent_seconds, 1),
                "silent_windows": self.num_silent_windows}


def balancer_interval(windows: list[Window]) -> float | None:
    """The median seconds between the balancer's acts over `windows` (oldest first); None under two acts. A window
    with n acts holds n - 1 gaps of its seconds / n; consecutive windows with acts, the gap between their starts."""
    acted = [w for w in windows if w.counters.get(EVENTS, 0.0) > 0]
    gaps = [b.start - a.start for a, b in zip(acted, acted[1:], strict=False)]
    for w in acted:
        n = int(w.counters[EVENTS])
        gaps += [w.seconds / n] * (n - 1)
    return float(np.median(gaps)) if gaps else None


def watch_balancer(state: PoolState, engine: str, max_silent_intervals: int = MAX_SILENT_INTERVALS) -> BalancerWatch:
    if engine == "bundled":
        return _watch_switches(state, max_silent_intervals)
    return _watch_acts(state, engine, max_silent_intervals)


def _watch_acts(state: PoolState, engine: str, max_silent_intervals: int) -> BalancerWatch:
    windows = [w for w in state.windows if w.counters.get(REPORTS, 0.0) > 0]
    verdict = BalancerWatch(state.deployment, state.role, engine, None, False,
                            "the agents do not count the engine balancer's acts")
    if not windows:
        return verdict
    acts = ENGINE_TO_ACTS.get(engine, "rearranges")
    interval = balancer_interval(windows)
    if interval is None:
        return BalancerWatch(state.deployment, state.role, engine, acts, False,
                             "fewer than two of the balancer's acts seen: its interval is not known yet")
    last_act = max(i for i, w in enumerate(windows) if w.counters.get(EVENTS, 0.0) > 0)
    silent = [w for w in windows[last_act + 1:] if w.is_serving]
    seconds = float(sum(w.seconds for w in silent))
    is_stalled = seconds > max_silent_intervals * interval and len(silent) >= MIN_SILENT_WINDOWS
    if is_stalled:
        reason = (f"the engine's balancer has not acted ({acts}) for {seconds:.0f}s of serving ({len(silent)} "
                  f"windows), over {max_silent_intervals} of its {interval:.0f}s intervals: it has stopped while the "
                  f"engine serves")
    else:
        reason = f"the balancer acts every ~{interval:.0f}s ({acts}); {seconds:.0f}s of serving since its last act"
    return BalancerWatch(state.deployment, state.role, engine, acts, is_stalled, reason, interval, seconds,
                         len(silent))


def is_lagging(window: Window, version: int) -> bool:
    """Some of the window's reports ran a placement older than `version`: the window is stored under an older one,
    or its slot load left out reports that did not run the window's (controlplane/observed/pool.py Window)."""
    return window.placement_version < version or window.num_slot_reports < window.num_reports


def _watch_switches(state: PoolState, max_silent_windows: int) -> BalancerWatch:
    told, version = state.last_change_at, state.placement_version
    if told is None or version == 0:
        return BalancerWatch(state.deployment, state.role, "bundled", "switches", False, "no placement issued")
    after = [w for w in state.windows if w.start >= told + SETTLE_WINDOWS * w.seconds]
    if after and not is_lagging(after[-1], version):
        return BalancerWatch(state.deployment, state.role, "bundled", "switches", False,
                             f"the group switched to placement v{version}")
    lagging = [w for w in after if w.is_serving and is_lagging(w, version)]
    seconds = float(sum(w.seconds for w in lagging))
    is_stalled = len(lagging) >= max(max_silent_windows, MIN_SILENT_WINDOWS)
    reason = (f"placement v{version} was issued {len(lagging)} serving windows ago and the group's ranks still run "
              f"an older one: it does not switch when told" if is_stalled else
              f"placement v{version} issued; {len(lagging)} serving windows since without it")
    return BalancerWatch(state.deployment, state.role, "bundled", "switches", is_stalled, reason, None, seconds,
                         len(lagging))
