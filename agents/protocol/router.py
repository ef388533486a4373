"""What a router reports per window, and what the controller answers it (part of moectl.v1).

The router owns the deployment-level view the pool planner sizes pools from: it sees every request from
arrival to last token, so TTFT here includes the queue, the prefill, the KV hand-off and its own routing,
where a prefill rank's TTFT stops at its first token and a decode rank never sees one it did not prefill.
It also knows what it sent where (the local/remote split behind the PD-aware threshold), which is why
the threshold is answered to it and no one else.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agents.protocol.wire import NAME_PATTERN, PROTOCOL_VERSION, LatencySummary, _Frozen, known_protocol

_Count = Field(default=0, ge=0)


class RouterWindow(_Frozen):
    """One router's window on the controller's grid. Counts are of requests; tokens are sums; latencies
    in seconds: ttft from arrival at the router to the first token (ttft_local: prompts the decode instance
    prefilled itself; ttft_remote: prefill instance -> KV hand-off -> decode), itl per generated token,
    request_seconds arrival to last token, kv_transfer prefill sent to KV received."""

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
        return self


class RouterState(_Frozen):
    """What the controller wants the router to run; rides the router window's response."""

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    local_prefill_threshold: int | None = Field(default=None, ge=0, description="PD-aware threshold, tokens; "
                                                                                "None: the router's own default")
    window_seconds: float | None = Field(default=None, gt=0, description="the window length the controller wants")
