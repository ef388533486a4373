"""The router's window: what arrived, how it was routed and what its requests lived through, closed on the
controller's grid (agents/protocol/grid.py) into a `RouterWindow` the pool planner reads.

A request counts as an arrival in the window it arrived in; its first token, tokens and end count in the
windows they happen in. Everything here runs on the router's event loop: plain appends, no locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.protocol import NUM_PROMPT_BUCKETS, LatencySummary, RouterWindow, prompt_bucket
from agents.protocol.grid import window_index, window_start


@dataclass
class _Sums:
    index: int
    num_arrivals: int = 0
    num_local: int = 0
    input_tokens: int = 0
    prompt_buckets: list[int] = field(default_factory=lambda: [0] * NUM_PROMPT_BUCKETS)  # arrivals per length bucket
    num_finished: int = 0
    output_tokens: int = 0
    num_failed: int = 0
    ttft_local: list[float] = field(default_factory=list)
    ttft_remote: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    request_seconds: list[float] = field(default_factory=list)
    kv_transfer: list[float] = field(default_factory=list)


class RouterWindows:
    """deployment, router: who reports; now: unix seconds where a method takes it."""

    def __init__(self, deployment: str, router: str, window_seconds: float, now: float):
        self.deployment, self.router, self.window_seconds = deployment, router, window_seconds
        self.current = _Sums(window_index(now, window_seconds))

    def arrived(self, route_kind: str, num_prompt_tokens: int) -> None:
        """route_kind: pd (prefill pool, then decode), local (decode prefills it) or unified."""
        self.current.num_arrivals += 1
        self.current.num_local += route_kind == "local"
        self.current.input_tokens += num_prompt_tokens
        self.current.prompt_buckets[prompt_bucket(num_prompt_tokens)] += 1

    def first_token(self, route_kind: str, seconds: float) -> None:
        (self.current.ttft_remote if route_kind == "pd" else self.current.ttft_local).append(seconds)

    def tokens(self, seconds_per_token: float, num_tokens: int) -> None:
        self.current.itl += [seconds_per_token] * num_tokens

    def transferred(self, seconds: float) -> None:
        self.current.kv_transfer.append(seconds)

    def finished(self, num_output_tokens: int, seconds: float, is_failed: bool) -> None:
        if is_failed:
            self.current.num_failed += 1
            return
        self.current.num_finished += 1
        self.current.output_tokens += num_output_tokens
        self.current.request_seconds.append(seconds)

    def roll(self, now: float, threshold: int | None = None) -> RouterWindow | None:
        """The window that ended by `now`, if one did; the next starts at `now`'s window. threshold: the
        PD-aware threshold routed by now."""
        if now < window_start(self.current.index + 1, self.window_seconds):
            return None
        closed, self.current = self.current, _Sums(window_index(now, self.window_seconds))
        return RouterWindow(
            deployment=self.deployment, router=self.router,
            window_start=window_start(closed.index, self.window_seconds), window_seconds=self.window_seconds,
            num_arrivals=closed.num_arrivals, num_local=closed.num_local, input_tokens=closed.input_tokens,
            prompt_buckets=tuple(closed.prompt_buckets),
            num_finished=closed.num_finished, output_tokens=closed.output_tokens, num_failed=closed.num_failed,
            ttft=LatencySummary.of(closed.ttft_local + closed.ttft_remote),
            ttft_local=LatencySummary.of(closed.ttft_local), ttft_remote=LatencySummary.of(closed.ttft_remote),
            itl=LatencySummary.of(closed.itl), request_seconds=LatencySummary.of(closed.request_seconds),
            kv_transfer=LatencySummary.of(closed.kv_transfer), local_prefill_threshold=threshold)

    def set_window_seconds(self, window_seconds: float, now: float) -> None:
        """The controller's window length, from the next window on (the one filling now is dropped: it
        would straddle two grids)."""
        if window_seconds != self.window_seconds:
            self.window_seconds = window_seconds
            self.current = _Sums(window_index(now, window_seconds))
