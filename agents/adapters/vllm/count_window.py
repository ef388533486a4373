"""The workers' cumulative per-expert counts (window_handoff.py, served by count_route.py) -> one window's
per-expert load. Pure.

A worker record: `format`, `epoch` (its process's start), `seq`, `at`, `vllm`, `rank`, `tp_rank`, `dp_rank`,
`ep_size`, `layers` (hidden-layer indices it counts), `counts` [len(layers), >= num_experts] tokens since `epoch`,
`num_failures`. TP ranks of one DP rank route the same tokens, so only `tp_rank` 0 counts toward the load; DP ranks
route their own tokens and add up; PP ranks hold disjoint layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.adapters.errors import EngineFormatError
from agents.protocol import ModelShape

COUNTS_FORMAT = 1  # window_handoff.COUNTS_FORMAT, what this reader understands
RECORD_KEYS = frozenset({"format", "epoch", "seq", "at", "vllm", "rank", "tp_rank", "dp_rank", "ep_size", "layers",
                         "counts", "num_failures"})


@dataclass(frozen=True)
class Cumulative:
    """by_rank: rank -> (epoch, [num_layers, num_experts] int64 tokens since that epoch, in MoE-layer order)."""
    by_rank: dict[int, tuple[str, np.ndarray]]
    ep_size: int


def cumulative(workers: list[dict], model: ModelShape, *, version: str) -> Cumulative:
    """Raises EngineFormatError naming the field where a record is of another format or does not fit the model.
    The MoE layers are the hidden layers the workers count, in order (PP ranks each count some)."""
    moe_layer_ids = tuple(sorted({layer for record in workers for layer in record.get("layers", [])}))
    if workers and len(moe_layer_ids) != model.num_layers:
        raise EngineFormatError("vllm", version, "expert-counts layers", f"the workers count hidden layers "
                                f"{list(moe_layer_ids)}; the model has {model.num_layers} MoE layers: another "
                                f"model's state dir, or a worker that has not counted yet")
    by_rank: dict[int, tuple[str, np.ndarray]] = {}
    ep_size = 1
    for record in workers:
        where = f"expert-counts record of rank {record.get('rank', '?')}"
        if record.get("format") != COUNTS_FORMAT or set(record) - RECORD_KEYS:
            raise EngineFormatError("vllm", version, where, f"is format {record.get('format')!r} with keys "
                                    f"{sorted(record)}; this sidecar reads format {COUNTS_FORMAT} "
                                    f"({sorted(RECORD_KEYS)}): run the plugin and sidecar of one moectl")
        if record["tp_rank"] != 0:
            continue
        table = np.zeros((model.num_layers, model.num_experts), dtype=np.int64)
        for layer, row in zip(record["layers"], record["counts"], strict=True):
            row = np.asarray(row, dtype=np.int64)
            if row.shape[0] < model.num_experts or row[model.num_experts:].any() or (row < 0).any():
                raise EngineFormatError("vllm", version, f"{where} counts", f"has {row.shape[0]} columns; the model "
                                        f"has {model.num_experts} logical experts")
            table[moe_layer_ids.index(layer)] = row[:model.num_experts]
        by_rank[int(record["rank"])] = (str(record["epoch"]), table)
        ep_size = max(ep_size, int(record["ep_size"]))
    return Cumulative(by_rank, ep_size)


def window_counts(before: Cumulative, after: Cumulative) -> np.ndarray:
    """[num_layers, num_experts] tokens counted between two reads; a rank restarted in between (a new epoch) or
    new since counts from its start."""
    total = None
    for rank, (epoch, table) in after.by_rank.items():
        old = before.by_rank.get(rank)
        delta = table - old[1] if old is not None and old[0] == epoch else table
        if (delta < 0).any():
            raise EngineFormatError("vllm", "", f"expert-counts of rank {rank}", "went backwards within one epoch")
        total = delta if total is None else total + delta
    if total is None:
        raise EngineFormatError("vllm", "", "expert-counts", "no worker of TP rank 0 reported")
    return total
