"""Per-request latencies from the engine's outputs: time to first token, inter-token latency, queue time.

The engine stamps every output with `time.monotonic()` times; this turns a step's outputs into
samples once, so the window (snapshot) and the exporter (histograms) see the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.runtime.stats import StepStats


@dataclass(slots=True)
class LatencySamples:
    """Seconds, one entry per observation in one step."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)


class RequestTimer:
    """Remembers when each live request last produced tokens."""

    def __init__(self):
        self.last_token_time: dict[str, float] = {}

    def observe(self, stats: StepStats) -> LatencySamples:
        samples = LatencySamples()
        for out in stats.outputs:
            if not out.new_token_ids:
                continue
            last = self.last_token_time.get(out.request_id)
            if last is None and out.num_output_tokens == len(out.new_token_ids):
                # the request's first tokens came out of this engine (a KV hand-off brings its first
                # token along, so a decode instance never claims a TTFT it did not serve)
                if out.first_token_time is not None:
                    samples.ttft.append(max(0.0, out.first_token_time - out.arrival_time))
                if out.first_scheduled_time is not None:
                    samples.queue.append(max(0.0, out.first_scheduled_time - out.arrival_time))
            elif last is not None:
                # per token: MTP commits several tokens per step, which is what a user sees
                samples.itl.append(max(0.0, stats.timestamp - last) / len(out.new_token_ids))
            if out.is_finished:
                self.last_token_time.pop(out.request_id, None)
            else:
                self.last_token_time[out.request_id] = stats.timestamp
        return samples
