"""Local search on a placement table: relieve each layer's most loaded GPU, one move per round.

The moves (swap, retarget, chain; see `moves`) keep every expert present and never put two replicas of
one expert on a GPU. A move is taken only if every GPU it touches ends below the layer's current
maximum, so the maximum never rises. With a `current` table each move's cost is the change in slots
differing from it; a global budget is spent on the best gain per moved slot across layers.
Shapes: L layers, E experts, S slots, G GPUs, k slots per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol.placement import even_share, gpu_load, replica_counts, slot_load
from controlplane.solve.placement.locality import Locality
from controlplane.solve.placement.moves import SearchArrays, best_moves


@dataclass(frozen=True)
class Search:
    """How long the local search looks, how wide, and which moves it takes."""

    max_rounds: int = 2000
    num_partner_gpus: int = 4  # the lightest GPUs a hot GPU's replicas may move to, per round
    num_spares: int = 16  # the cheapest spare replicas per layer a retarget may take
    # smallest accepted drop of a layer's max GPU load per moved slot, as a fraction of the layer's mean GPU
    # load (a move must pay for the weights it transfers)
    min_gain: float = 1e-9
    tolerance: float = 0.0  # a layer whose max/mean GPU load is within this of 1 is left alone


def improve(table: np.ndarray, load: np.ndarray, slots_per_gpu: int, current: np.ndarray | None = None,
            max_moved_slots: int | None = None, locality: Locality | None = None,
            search: Search = Search()) -> np.ndarray:
    """Return an improved copy of table [L, S].

    `load`: [L, E] tokens. `current`: [L, S] applied table. `locality`: None without group locality.
    """
    table = table.copy()
    num_layers, num_slots = table.shape
    num_gpus = num_slots // slots_per_gpu
    slot_gpu = np.arange(num_slots) // slots_per_gpu
    # the search scores moves on the even split (shares come after it, see `shares`); the arrays below
    # are the protocol's numbers for `table`, refreshed for every layer a round changes
    counts = replica_counts(table, load.shape[1])
    slots = slot_load(table, load, even_share(table, counts))
    gpus = gpu_load(slots, num_gpus)
    is_on_gpu = np.zeros((num_layers, num_gpus, load.shape[1]), dtype=bool)
    is_on_gpu[np.arange(num_layers)[:, None], slot_gpu[None, :], table] = True
    budget = np.inf if max_moved_slots is None or current is None else float(max_moved_slots)
    if current is not None:
        budget -= (table != current).sum()
    threshold = search.min_gain * load.sum(axis=1) / num_gpus
    ceiling = (1.0 + search.tolerance) * load.sum(axis=1) / num_gpus
    is_active = np.ones(num_layers, dtype=bool)
    num_partners = min(search.num_partner_gpus, num_gpus - 1)
    arrays = SearchArrays(table, load, counts, slots, gpus, is_on_gpu, slots_per_gpu)
    for _ in range(search.max_rounds):
        layers = np.flatnonzero(is_active)
        if len(layers) == 0 or num_partners < 1:
            break
        move = best_moves(layers, arrays, locality, current, num_partners, min(search.num_spares, num_slots),
                          threshold)
        is_good = (move["gain"] > threshold[layers] * np.maximum(move["cost"], 1)) \
            & (gpus[layers].max(axis=1) > ceiling[layers])
        is_active[layers[~is_good]] = False
        taken = is_good.copy()
        if budget < np.inf:
            taken[:] = False
            # spend the budget on the best gain per moved slot first; free moves always pass
            for index in np.argsort(-move["gain"] / np.maximum(move["cost"], 0.5), kind="stable"):
                if is_good[index] and move["cost"][index] <= budget:
                    taken[index] = True
                    budget -= move["cost"][index]
                elif is_good[index]:
                    is_active[layers[index]] = False
        changed = layers[taken]
        for slot, expert in (("slot1", "expert1"), ("slot2", "expert2")):
            has_write = move[slot][taken] >= 0
            table[changed[has_write], move[slot][taken][has_write]] = move[expert][taken][has_write]
        counts[changed] = replica_counts(table[changed], load.shape[1])
        slots[changed] = slot_load(table[changed], load[changed], even_share(table[changed], counts[changed]))
        gpus[changed] = gpu_load(slots[changed], num_gpus)
        is_on_gpu[changed] = False
        is_on_gpu[changed[:, None], slot_gpu[None, :], table[changed]] = True
    return table
