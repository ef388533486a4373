"""A step-time model for one EP group: the most loaded GPU sets the pace of every MoE layer.

Numbers are for an H800-class GPU serving a DeepSeek-V3-like layer; they only need to move the
right way with load, imbalance and the traffic that crosses GPUs. The simulated engine (per step)
and the simulated fleet (per window) both time their work here.

The all-to-all is priced by the link each row crosses (`Links`). A row to another GPU of the same node
goes over NVLink. A token's rows on another node cost one network copy per node (sent once, then
forwarded inside the node, as DeepEP does). So the network part scales with the nodes a token reaches,
which the group limit bounds (agents/sim/reach.py). Each exchange also pays a fixed time whatever
travels (latency, synchronisation). `GPU_NODES` is DeepSeek-V3 on 64 H100s: cross-node all-to-all
took >35% of inference time without a group limit, ~12% with it. `CPU_GLOO` is this machine's: a dense
all-to-all over loopback gloo whose time is its latency, so the number of groups a token reaches barely changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DENSE_SECONDS_PER_TOKEN = 6.0e-6  # attention + shared expert, per token and MoE layer, on the token's own rank
EXPERT_SECONDS_PER_ROW = 2.0e-6  # routed-expert GEMMs per token-expert row on one GPU


@dataclass(frozen=True)
class Links:
    name: str
    gpu_seconds_per_row: float  # a row to another GPU of the same node (NVLink)
    node_seconds_per_copy: float  # a token's copy to another node (the network)
    exchange_seconds: float  # per exchange (dispatch or combine), MoE layer and step, whatever travels


GPU_NODES = Links("gpu-nodes", gpu_seconds_per_row=0.01e-6, node_seconds_per_copy=1.3e-6, exchange_seconds=1e-6)
CPU_GLOO = Links("cpu-gloo", gpu_seconds_per_row=0.01e-6, node_seconds_per_copy=0.01e-6, exchange_seconds=3e-3)
LINKS = {links.name: links for links in (GPU_NODES, CPU_GLOO)}


@dataclass(frozen=True)
class Traffic:
    """What exchanging one of a GPU's rows takes, on average: the share of rows that arrive from another
    GPU, and the network copies per row (one per remote node a token reaches, spread over its top_k rows)."""

    off_gpu_share: float = 0.0
    node_copies_per_row: float = 0.0


@dataclass(frozen=True)
class StepTimes:
    forward_seconds: float
    dispatch_seconds: float
    combine_seconds: float


def step_times(gpu_rows: np.ndarray, num_tokens: float, traffic: Traffic, links: Links,
               num_steps: int = 1) -> StepTimes:
    """The seconds one rank spends on `num_tokens` tokens over `num_steps` steps, every layer waiting for its
    busiest GPU.

    `gpu_rows`: [num_layers, ep_size] token-expert rows each GPU computes over the same span (a step or a
    window). `num_tokens`: tokens through this rank's dense layers (attention is data parallel). One rank
    alone exchanges nothing.
    """
    num_layers, ep_size = gpu_rows.shape
    busiest = float(gpu_rows.max(axis=1).sum())
    exchange = 0.0
    if ep_size > 1:
        per_row = traffic.off_gpu_share * links.gpu_seconds_per_row \
            + traffic.node_copies_per_row * links.node_seconds_per_copy
        exchange = busiest * per_row + links.exchange_seconds * num_layers * num_steps
    dense = DENSE_SECONDS_PER_TOKEN * num_tokens * num_layers
    return StepTimes(dense + EXPERT_SECONDS_PER_ROW * busiest + 2 * exchange, exchange, exchange)
