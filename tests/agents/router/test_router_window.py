"""The router's window counts its arrivals by prompt length, in the wire's buckets, and starts afresh each window."""

from __future__ import annotations

from agents.protocol import NUM_PROMPT_BUCKETS, prompt_bucket
from agents.router.window import RouterWindows

T0 = 1_800_000_000.0


def test_arrivals_are_counted_in_their_prompt_length_buckets():
    windows = RouterWindows("tiny", "router-0", 10.0, T0)
    for kind, tokens in (("local", 100), ("pd", 900), ("pd", 1000), ("pd", 16_000)):
        windows.arrived(kind, tokens)
    closed = windows.roll(T0 + 10.0)
    assert closed.num_arrivals == 4 and len(closed.prompt_buckets) == NUM_PROMPT_BUCKETS
    assert closed.prompt_buckets[prompt_bucket(100)] == 1 and closed.prompt_buckets[prompt_bucket(900)] == 2
    assert closed.prompt_buckets[prompt_bucket(16_000)] == 1 and sum(closed.prompt_buckets) == 4
    windows.arrived("pd", 900)
    assert sum(windows.roll(T0 + 20.0).prompt_buckets) == 1  # the next window counts only its own
