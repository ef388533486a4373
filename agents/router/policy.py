"""Which rank serves a request: prefix-cache affinity and load for prefill, load for decode, and the
PD-aware threshold that keeps short prompts on the decode instance. A draining instance's ranks get no
new requests.

The router cannot see the workers' caches, so it remembers which block hashes it sent where (an
LRU per endpoint, as llm-d's approximate prefix-cache scorer does): affinity is the share of the
prompt's full blocks the endpoint was last sent. Load is what the router has in flight there plus
the queue the rank last reported.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

BLOCK_SIZE = 16  # the workers' KV block size: a prefix hits by whole blocks
AFFINITY_WEIGHT = 4.0  # one whole prompt cached is worth four requests of queue


def block_hashes(token_ids: list[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """Hash chain over the prompt's full blocks (the last token is always computed, as in the engine)."""
    hashes, parent = [], -1
    for i in range((len(token_ids) - 1) // block_size):
        parent = hash((parent, tuple(token_ids[i * block_size : (i + 1) * block_size])))
        hashes.append(parent)
    return hashes


@dataclass
class Endpoint:
    """One rank of an instance. num_in_flight: requests the router has there, counted until the rank's part
    is done (a prefill rank's when its KV hand-off has arrived, a decode rank's at the last token)."""

    url: str
    role: str  # prefill | decode | unified
    instance: str = ""  # the instance (EP group) the rank belongs to; default: the URL
    max_blocks: int = 8192
    num_in_flight: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    is_healthy: bool = True
    is_draining: bool = False
    blocks: OrderedDict = field(default_factory=OrderedDict)

    def affinity(self, hashes: list[int]) -> float:
        """Share of the prompt's blocks, counted from the start, this endpoint was sent before."""
        matched = 0
        for h in hashes:
            if h not in self.blocks:
                break
            matched += 1
        return matched / len(hashes) if hashes else 0.0

    def remember(self, hashes: list[int]) -> None:
        for h in hashes:
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.max_blocks:
            self.blocks.popitem(last=False)

    @property
    def load(self) -> float:
        return self.num_in_flight + self.num_waiting + 0.1 * self.num_running


    def __post_init__(self) -> None:
        self.instance = self.instance or self.url


def _candidates(endpoints: list[Endpoint]) -> list[Endpoint]:
    serving = [e for e in endpoints if not e.is_draining]
    healthy = [e for e in serving if e.is_healthy]
    return healthy or serving  # fail open: a stale health view must not stop all traffic


def pick_by_affinity(endpoints: list[Endpoint], hashes: list[int]) -> tuple[Endpoint, float]:
    best = max(_candidates(endpoints), key=lambda e: (AFFINITY_WEIGHT * e.affinity(hashes) - e.load, -e.load))
    return best, best.affinity(hashes)


def pick_by_load(endpoints: list[Endpoint]) -> Endpoint:
    return min(_candidates(endpoints), key=lambda e: e.load)


@dataclass(frozen=True)
class Route:
    kind: str  # pd (prefill then decode) | local (decode prefills itself) | unified
    prefill: Endpoint | None
    decode: Endpoint
    affinity: float


def route(token_ids: list[int], *, prefill: list[Endpoint], decode: list[Endpoint], unified: list[Endpoint],
          threshold: int) -> Route:
    """threshold: prompts with fewer uncached tokens prefill on the decode rank (PD-aware)."""
    hashes = block_hashes(token_ids)
    prefill, decode, unified = (_candidates(e) for e in (prefill, decode, unified))
    if unified and not (prefill and decode):
        endpoint, affinity = pick_by_affinity(unified, hashes)
        return Route("unified", None, endpoint, affinity)
    if not decode:
        raise LookupError("no decode or unified instance is serving (none registered, or all draining)")
    target = pick_by_load(decode)
    uncached = len(token_ids) * (1.0 - target.affinity(hashes))
    if not prefill or uncached < threshold:
        return Route("local", None, target, target.affinity(hashes))
    source, affinity = pick_by_affinity(prefill, hashes)
    return Route("pd", source, target, affinity)
