"""Every request's fate in one place: [n] arrays indexed by request, filled as the simulation runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from benchmarks.pdsim.trace import Trace

PENDING, DONE, ABORTED = 0, 1, 2  # an ABORTED request was in flight on a replica removed without drain


@dataclass
class Requests:
    arrival: np.ndarray  # [n] seconds
    input_tokens: np.ndarray  # [n]
    output_tokens: np.ndarray  # [n]
    is_local: np.ndarray = field(init=False)  # [n] prefilled on the decode pool
    kv_ready: np.ndarray = field(init=False)  # [n] KV on the decode side (remote) / prefill done (local)
    first_token: np.ndarray = field(init=False)  # [n] seconds; NaN until emitted
    decode_seconds: np.ndarray = field(init=False)  # [n] time spent in decode steps after the first token
    finish: np.ndarray = field(init=False)  # [n] seconds; NaN until done
    status: np.ndarray = field(init=False)  # [n] PENDING | DONE | ABORTED

    def __post_init__(self) -> None:
        n = self.arrival.size
        self.is_local = np.zeros(n, dtype=bool)
        self.kv_ready = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.decode_seconds = np.zeros(n)
        self.finish = np.full(n, np.nan)
        self.status = np.zeros(n, dtype=np.int8)

    @classmethod
    def of(cls, trace: Trace) -> Requests:
        return cls(trace.arrival, trace.input_tokens, trace.output_tokens)

    @property
    def ttft(self) -> np.ndarray:
        return self.first_token - self.arrival

    @property
    def itl(self) -> np.ndarray:
        """[n] mean seconds between output tokens (NaN for one-token outputs and unfinished requests)."""
        gaps = (self.output_tokens - 1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((self.status == DONE) & (gaps > 0), self.decode_seconds / gaps, np.nan)
