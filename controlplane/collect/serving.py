"""Serving windows: a rank's serving counters and a router's window as flat counters, which
controlplane/observed/serving.py merges and reads back. Pure.

A router window also says the local-prefill threshold it routed by (`local_prefill_threshold`). Its arrivals
per prompt-length bucket travel as `prompt_bucket_<i>` counters (added up like any count). A deployment window whose
buckets do not add up to its arrivals (a router that does not count them) has no length mix.
"""

from __future__ import annotations

from agents.protocol import LatencySummary, RankRow, RouterWindow, Snapshot
from controlplane.observed.serving import PERCENTILES

SUMMARIES = ("ttft", "ttft_local", "ttft_remote", "itl", "request_seconds", "kv_transfer")


def _flat(name: str, summary: LatencySummary) -> dict[str, float]:
    out = {f"{name}_count": float(summary.count), f"{name}_sum": summary.sum}
    return out | {f"{name}_{p}": getattr(summary, p) for p in PERCENTILES if getattr(summary, p) is not None}


def replica_counters(snapshot: Snapshot | RankRow) -> dict[str, float] | None:
    """One rank's part of its instance's window (its v1 snapshot, or its row of a v2 group snapshot); None from
    an agent that does not measure serving work."""
    serving = snapshot.serving
    if serving is None:
        return None
    return serving.model_dump() | {"num_steps": float(snapshot.num_steps)} | _flat("ttft", snapshot.ttft) | \
        _flat("itl", snapshot.itl)


def router_counters(window: RouterWindow) -> dict[str, float]:
    counts = window.model_dump(include={"num_arrivals", "num_local", "input_tokens", "num_finished", "output_tokens",
                                        "num_failed"})
    out = {k: float(v) for k, v in counts.items()}
    if window.local_prefill_threshold is not None:
        out["local_prefill_threshold"] = float(window.local_prefill_threshold)
    if window.prompt_buckets is not None:
        out |= {f"prompt_bucket_{i}": float(count) for i, count in enumerate(window.prompt_buckets)}
    for name in SUMMARIES:
        out |= _flat(name, getattr(window, name))
    return out


