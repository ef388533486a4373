"""An engine's `/metrics` page (Prometheus text format) as plain numbers: the adapters' one parser.

Engines label their series per rank (SGLang: tp_rank, moe_ep_rank, dp_rank; vLLM: engine): a `Scrape` keeps
every labelled sample, and its readers sum them (counts) or take the largest (ratios), as the serving
window needs (agents/adapters/serving.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from agents.adapters.errors import EngineFormatError


@dataclass(frozen=True)
class Scrape:
    """samples: sample name (`_total`, `_bucket`, `_sum`, `_count` suffixes kept) -> [(labels, value)].
    at: unix seconds the page was read."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    at: float = 0.0

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str) -> float:
        """The sum over label sets of `name`; 0.0 when absent."""
        return sum(value for _, value in self.samples.get(name, []))

    def largest(self, name: str) -> float:
        """The largest value over label sets of `name`; 0.0 when absent."""
        return max((value for _, value in self.samples.get(name, [])), default=0.0)

    def buckets(self, name: str) -> dict[float, float]:
        """Histogram `name` (without `_bucket`): upper bound (seconds, +inf last) -> cumulative count, summed over
        label sets."""
        out: dict[float, float] = {}
        for labels, value in self.samples.get(f"{name}_bucket", []):
            bound = float(labels["le"])
            out[bound] = out.get(bound, 0.0) + value
        return dict(sorted(out.items()))


def parse_metrics(text: str, *, engine: str, version: str, at: float = 0.0) -> Scrape:
    """text: a Prometheus text page -> its samples; raises EngineFormatError naming the engine's version where
    the page does not parse (an HTML error page, a truncated answer)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise EngineFormatError(engine, version, "/metrics", f"not a Prometheus text page: {exc}") from None
    return Scrape(samples, at)
