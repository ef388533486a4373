"""What every message of the wire contract shares: the protocol version, names, and the bounds of its fields.

`PROTOCOL_VERSION` changes with any incompatible change; the controller rejects versions it does not speak.

Every field is bounded, so what the controller stores and sums always fits (a tighter check of what
was always meant, hence no new protocol version):

1. Counts (tokens, steps, requests, drafts; every element of the load arrays and histograms): at most
   `MAX_COUNT` = 2^40 per rank and window. A rank routing 10^6 tokens/s over the longest window (3600 s) counts
   3.6e9, 2^32. The controller's int64 window sums stay exact up to 2^23 reports of one window (a 1,024-GPU
   fleet sends 2^10), while it still checks each sum (`controlplane/store/windows.py`).
2. Seconds (step time sums, latencies): finite and at most `MAX_SECONDS` = 1e9, thirty years. Summed over
   any number of ranks they stay finite (two ranks of 1.7e308 summed to Infinity).
3. Names: at most as long as the controller's columns (instance 128, node 256, gpu_uuid 128, model name
   128), and printable: no NUL byte (PostgreSQL's text cannot hold one) nor other control characters.
4. Sizes where the controller keeps 32-bit integers: gpus_per_node at most 1024 GPUs on one node,
   placement versions under 2^31.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = "moectl.v1"


def known_protocol(value: object) -> object:
    """The `protocol` field's check, for every message that carries one."""
    if value != PROTOCOL_VERSION:
        raise ValueError(f"protocol {value!r} is not spoken here; this controller speaks {PROTOCOL_VERSION!r}")
    return value


NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # DNS label: also a Kubernetes object name
MAX_COUNT = 2**40  # per rank and window; see the module docstring
MAX_SECONDS = 1e9
MAX_VERSION = 2**31 - 1  # the controller keeps versions in 32-bit integers
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"  # no NUL byte, no control characters

_Count = Field(default=0, ge=0, le=MAX_COUNT)
_Seconds = Field(default=0.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LatencySummary(_Frozen):
    """A latency distribution over one window, in seconds."""

    count: int = Field(default=0, ge=0, le=MAX_COUNT)
    sum: float = Field(default=0.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p50: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p90: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p99: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)

    @classmethod
    def of(cls, samples: list[float]) -> LatencySummary:
        """The distribution of `samples` (seconds): count, sum and percentiles; empty when there are none."""
        if not samples:
            return cls()
        values = np.asarray(samples, dtype=np.float64)
        p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99])
        return cls(count=len(values), sum=float(values.sum()), p50=float(p50), p90=float(p90), p99=float(p99))
