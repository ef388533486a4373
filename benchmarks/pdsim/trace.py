"""Seeded request traces: arrival times with input and output lengths, for three traffic shapes.

A trace is a rate curve (requests/s, one value per second) sampled as a Poisson process; prompt and
output lengths are lognormal (chat-like: most prompts around a thousand tokens, a fifth under 512,
a long tail). `bursty`: a base rate with bursts that ramp up in ~30 s to 2-3x and last minutes
(a Cox process: the rate itself is noisy). `diurnal`: one day compressed into the trace, prompts a
little longer at the peak. `step`: a low rate, then 3x for the middle third, then low again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INPUT_MEDIAN, INPUT_SIGMA = 900.0, 0.8
OUTPUT_MEDIAN, OUTPUT_SIGMA = 180.0, 0.7


@dataclass(frozen=True)
class Trace:
    """arrival: [n] seconds from the trace's start, sorted; input_tokens, output_tokens: [n] tokens."""

    name: str
    seconds: float
    arrival: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    rate: np.ndarray  # [seconds] the rate curve it was drawn from, requests/s

    @property
    def num_requests(self) -> int:
        return int(self.arrival.size)

    def peak(self, over_seconds: int) -> tuple[float, float]:
        """(start, mean arrival rate) of the busiest `over_seconds` span: what provisioning for the peak sizes for."""
        counts = np.bincount(self.arrival.astype(np.int64), minlength=int(self.seconds))[: int(self.seconds)]
        window = np.convolve(counts, np.ones(over_seconds), mode="valid")
        start = int(window.argmax())
        return float(start), float(window[start] / over_seconds)


def _sample(name: str, rate: np.ndarray, rng: np.random.Generator, input_scale: np.ndarray | None = None) -> Trace:
    counts = rng.poisson(rate)
    second = np.repeat(np.arange(rate.size), counts)
    arrival = np.sort(second + rng.uniform(0.0, 1.0, second.size))
    scale = 1.0 if input_scale is None else input_scale[arrival.astype(np.int64)]
    isl = INPUT_MEDIAN * scale * rng.lognormal(0.0, INPUT_SIGMA, arrival.size)
    osl = OUTPUT_MEDIAN * rng.lognormal(0.0, OUTPUT_SIGMA, arrival.size)
    return Trace(name, float(rate.size), arrival, np.clip(np.round(isl), 16, 16384).astype(np.int64),
                 np.clip(np.round(osl), 2, 2048).astype(np.int64), rate)


def diurnal(seconds: int, low: float, high: float, seed: int = 0) -> Trace:
    t = np.arange(seconds)
    phase = (1 - np.cos(2 * np.pi * t / seconds)) / 2  # 0 at both ends, 1 mid-trace
    return _sample("diurnal", low + (high - low) * phase, np.random.default_rng(seed), 0.9 + 0.2 * phase)


def step(seconds: int, low: float, high: float, seed: int = 0) -> Trace:
    t = np.arange(seconds)
    rate = np.where((t >= seconds // 3) & (t < 2 * seconds // 3), high, low).astype(np.float64)
    return _sample("step", rate, np.random.default_rng(seed))


def bursty(seconds: int, base: float, seed: int = 0, mean_gap: float = 600.0) -> Trace:
    rng = np.random.default_rng(seed)
    t = np.arange(seconds, dtype=np.float64)
    multiplier = np.ones(seconds)
    start = rng.exponential(mean_gap / 2)
    while start < seconds:
        height, length = rng.uniform(1.0, 2.0), rng.uniform(120.0, 300.0)
        rise = np.clip((t - start) / 30.0, 0.0, 1.0)
        fall = np.clip((start + length - t) / 30.0, 0.0, 1.0)
        multiplier += height * np.minimum(rise, fall)
        start += length + rng.exponential(mean_gap)
    # a slowly varying lognormal noise on the rate (one value per 10 s)
    noise = np.repeat(rng.lognormal(0.0, 0.1, seconds // 10 + 1), 10)[:seconds]
    return _sample("bursty", base * multiplier * noise, rng)


TRACES = {"bursty": bursty, "diurnal": diurnal, "step": step}
