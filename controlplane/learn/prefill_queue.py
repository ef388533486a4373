"""TTFT percentiles of a prefill pool serving a mix of prompt lengths: a queue with many servers. Pure NumPy.

The router sends each prompt to the prefill replica with the least load. In benchmarks/pdsim/router.py that is
the least queued work; in agents/router/policy.py, what it has in flight there and the rank's reported queue.
A prompt then waits about as it would in one first-come-first-served queue in front of all `servers` replicas:
an M/G/c queue. A prompt of L tokens is served in L / capacity seconds. So the mix of lengths, not its mean, sets
both the wait (Allen-Cunneen: the M/M/c wait x (1 + cv^2) / 2, cv of the service time) and the tail. A request's
TTFT is its wait plus its own service, and the few long prompts, served for seconds, are the requests past the
p99. The wait
of the requests that wait is taken as exponential (the M/M/c shape, at the Allen-Cunneen mean). Seconds,
requests/s; arrays [K] over the mix's lengths.
"""

from __future__ import annotations

import math

import numpy as np

MAX_SERVERS_EXACT = 512  # past this many (and far above the offered load) nobody waits: Erlang C is 0
BISECTIONS = 48


def erlang_c(servers: int, offered: float) -> float:
    """P(an arrival waits) in an M/M/c queue of `servers` offered `offered` erlangs (rate x mean service)."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    if servers > MAX_SERVERS_EXACT:
        return 0.0
    blocked = 1.0  # Erlang B, by its recursion: stable for any number of servers
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    rho = offered / servers
    return blocked / (1 - rho + rho * blocked)


def ttft_percentile(percentile: float, request_rate: float, service_seconds: np.ndarray, shares: np.ndarray,
                    servers: int, overhead_seconds: float = 0.0, max_utilisation: float = 0.97) -> float:
    """TTFT at `percentile` over the requests of a mix: each a `shares` part of the `request_rate` arrivals,
    served in `service_seconds`, plus `overhead_seconds` (hand-off); inf past `max_utilisation` of the servers."""
    service, shares = np.asarray(service_seconds, np.float64), np.asarray(shares, np.float64)
    shares = shares / shares.sum()
    mean = float(shares @ service)
    offered = request_rate * mean
    if servers < 1 or offered >= max_utilisation * servers:
        return float("inf")
    waits = erlang_c(servers, offered)
    spread = float(shares @ service**2) / mean**2 - 1.0  # squared coefficient of variation of the service time
    mean_wait = waits * mean / (servers - offered) * (1 + spread) / 2
    own = service + overhead_seconds
    miss = 1 - percentile / 100  # the share of requests allowed past the answer

    def late(t: float) -> float:
        """The share of requests whose TTFT exceeds t."""
        if waits == 0.0 or mean_wait == 0.0:
            return float(shares @ (own > t))
        over = np.where(own > t, 1.0, waits * np.exp(-np.maximum(t - own, 0.0) * waits / mean_wait))
        return float(shares @ over)

    low, high = 0.0, float(own.max()) + (mean_wait / max(waits, 1e-12)) * max(math.log(max(waits, 1e-12) / miss), 0.0)
    if late(low) <= miss:
        return low
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        low, high = (low, middle) if late(middle) <= miss else (middle, high)
    return high
