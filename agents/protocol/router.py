"""What a router reports per window, and what the controller answers it (part of moectl.v1).

The router owns the deployment-level view the pool planner sizes pools from: it sees every request from
arrival to last token. So TTFT here includes the queue, the prefill, the KV hand-off and its own routing.
A prefill rank's TTFT stops at its first token, and a decode rank never sees one it did not prefill.
It also knows what it sent where (the local/remote split behind the PD-aware threshold), which is why
the threshold is answered to it and no one else.
"""

from __future__ import annotations

import bisect
from typing import Literal

from pydantic import Field, field_validator, model_validator

from agents.protocol.wire import MAX_COUNT, NAME_PATTERN, PROTOCOL_VERSION, LatencySummary, _Frozen, known_protocol

_Count = Field(default=0, ge=0)

# prompt-length buckets of `RouterWindow.prompt_buckets`: bucket i counts the prompts of at most
# PROMPT_BUCKET_TOKENS[i] tokens (and more than bucket i-1's bound); the last bucket counts the longer ones.
# Powers of two, 64 .. 1,048,576 tokens: fixed, so routers' counts add up bucket by bucket.
PROMPT_BUCKET_TOKENS: tuple[int, ...] = tuple(2**k for k in range(6, 21))
NUM_PROMPT_BUCKETS = len(PROMPT_BUCKET_TOKENS) + 1


def prompt_bucket(num_tokens: int) -> int:
    """The bucket of `RouterWindow.prompt_buckets` a prompt of `num_tokens` tokens counts in."""
    return bisect.bisect_left(PROMPT_BUCKET_TOKENS, num_tokens)


class RouterWindow(_Frozen):
    """One router's window on the controller's grid.

    Counts are of requests; tokens are sums; latencies are in seconds.
    `ttft`: from arrival at the router to the first token. `ttft_local` covers prompts the decode instance
    prefilled itself; `ttft_remote`, prefill instance -> KV hand-off -> decode.
    `itl`: per generated token. `request_seconds`: arrival to last token. `kv_transfer`: prefill sent to KV received.

    `prompt_buckets`: [NUM_PROMPT_BUCKETS] arrivals per prompt-length bucket (PROMPT_BUCKET_TOKENS, powers of two),
    summing to num_arrivals. None from a router that does not count them (the planner then knows only the mean,
    input_tokens / num_arrivals). The pool planner sizes the prefill pool from this mix: a few long prompts wait
    behind others and set the TTFT tail, which a mean does not show."""

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    deployment: str = Field(pattern=NAME_PATTERN)
    router: str = Field(min_length=1, max_length=128, description="this router process, among the deployment's")
    window_start: float = Field(gt=0, allow_inf_nan=False, description="unix seconds")
    window_seconds: float = Field(gt=0, le=3600, allow_inf_nan=False)
    num_arrivals: int = _Count
    num_local: int = Field(default=0, ge=0, description="arrivals routed to prefill on a decode instance")
    input_tokens: int = Field(default=0, ge=0, description="prompt tokens of the arrivals")
    num_finished: int = _Count
    output_tokens: int = Field(default=0, ge=0, description="tokens generated for the requests finished")
    num_failed: int = _Count
    ttft: LatencySummary = LatencySummary()
    ttft_local: LatencySummary = LatencySummary()
    ttft_remote: LatencySummary = LatencySummary()
    itl: LatencySummary = LatencySummary()
    request_seconds: LatencySummary = LatencySummary()
    kv_transfer: LatencySummary = LatencySummary()
    local_prefill_threshold: int | None = Field(default=None, ge=0, le=1_000_000,
                                                description="the threshold it routed by at the window's end")
    prompt_buckets: tuple[int, ...] | None = Field(default=None, min_length=NUM_PROMPT_BUCKETS,
                                                   max_length=NUM_PROMPT_BUCKETS,
                                                   description="arrivals per prompt-length bucket "
                                                               "(PROMPT_BUCKET_TOKENS; the last: longer)")

    @field_validator("protocol", mode="before")
    @classmethod
    def _known_protocol(cls, value: object) -> object:
        return known_protocol(value)

    @model_validator(mode="after")
    def _check(self) -> RouterWindow:
        if self.num_local > self.num_arrivals:
            raise ValueError(f"num_local {self.num_local} exceeds num_arrivals {self.num_arrivals}")
        if self.ttft_local.count + self.ttft_remote.count > self.ttft.count:
            raise ValueError("ttft_local.count + ttft_remote.count exceeds ttft.count")
        if self.prompt_buckets is not None:
            if any(count < 0 or count > MAX_COUNT for count in self.prompt_buckets):
                raise ValueError(f"prompt_buckets counts must be within 0..{MAX_COUNT}")
            if sum(self.prompt_buckets) != self.num_arrivals:
                raise ValueError(f"prompt_buckets sum to {sum(self.prompt_buckets)}, not num_arrivals "
                                 f"{self.num_arrivals}")
        return self


class RouterState(_Frozen):
    """What the controller wants the router to run; rides the router window's response."""

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    local_prefill_threshold: int | None = Field(default=None, ge=0, description="PD-aware threshold, tokens; "
                                                                                "None: the router's own default")
    window_seconds: float | None = Field(default=None, gt=0, description="the window length the controller wants")
