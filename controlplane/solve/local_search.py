"""Local search on a placement table: relieve each layer's most loaded GPU, one move per round.

Two moves, both keeping every expert present and never two replicas of one expert on a GPU:
- swap: exchange a replica on the hottest GPU with a lighter replica on another GPU;
- retarget: turn a replica of a cool expert that has spares into one more replica of an expert on
  the hottest GPU, which lowers that expert's per-replica load everywhere (fixes stale replication).
A move is taken only if every GPU it touches ends below the layer's current maximum, so the
maximum never rises. With a `current` table each move's cost is the change in slots differing
from it; a global budget is spent on the best gain per moved slot across layers.
Shapes: L layers, E experts, S slots, G GPUs, k slots per GPU, n active layers, c candidate slots.
"""

from __future__ import annotations

import numpy as np


def _slot_loads(table: np.ndarray, load: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.take_along_axis(load, table, axis=1) / np.take_along_axis(counts, table, axis=1)


def _counts(table: np.ndarray, num_experts: int) -> np.ndarray:
    offsets = np.arange(table.shape[0])[:, None] * num_experts
    flat = np.bincount((table + offsets).ravel(), minlength=table.shape[0] * num_experts)
    return flat.reshape(table.shape[0], num_experts)


def improve(table: np.ndarray, load: np.ndarray, counts: np.ndarray, slots_per_gpu: int,
            current: np.ndarray | None = None, max_moved_slots: int | None = None,
            expert_node: np.ndarray | None = None, gpus_per_node: int = 1, max_rounds: int = 2000,
            num_partner_gpus: int = 4, num_spares: int = 16, min_gain: float = 1e-9,
            tolerance: float = 0.0) -> np.ndarray:
    """Return an improved copy of table [L, S].

    load: [L, E] tokens; counts: [L, E] replicas in `table`; current: [L, S] applied table;
    expert_node: [L, E] node each expert must stay on (-1: anywhere), for group locality;
    min_gain: smallest accepted drop of a layer's max GPU load per moved slot, as a fraction of
        the layer's mean GPU load (a move must pay for the weights it transfers).
    tolerance: a layer whose max/mean GPU load is within this of 1 is left alone.
    """
    table, counts = table.copy(), counts.copy()
    num_layers, num_slots = table.shape
    num_gpus = num_slots // slots_per_gpu
    slot_gpu = np.arange(num_slots) // slots_per_gpu
    slot_load = _slot_loads(table, load, counts)
    gpu_load = slot_load.reshape(num_layers, num_gpus, slots_per_gpu).sum(axis=2)
    is_on_gpu = np.zeros((num_layers, num_gpus, load.shape[1]), dtype=bool)
    is_on_gpu[np.arange(num_layers)[:, None], slot_gpu[None, :], table] = True
    budget = np.inf if max_moved_slots is None or current is None else float(max_moved_slots)
    if current is not None:
        budget -= (table != current).sum()
    threshold = min_gain * load.sum(axis=1) / num_gpus
    ceiling = (1.0 + tolerance) * load.sum(axis=1) / num_gpus
    is_active = np.ones(num_layers, dtype=bool)
    num_partners = min(num_partner_gpus, num_gpus - 1)
    for _ in range(max_rounds):
        layers = np.flatnonzero(is_active)
        if len(layers) == 0 or num_partners < 1:
            break
        move = _best_moves(layers, table, load, counts, slot_load, gpu_load, is_on_gpu, slots_per_gpu,
                           num_partners, min(num_spares, num_slots), expert_node, gpus_per_node, current)
        is_good = (move["gain"] > threshold[layers] * np.maximum(move["cost"], 1)) \
            & (gpu_load[layers].max(axis=1) > ceiling[layers])
        is_active[layers[~is_good]] = False
        taken = np.zeros(len(layers), dtype=bool)
        # spend the budget on the best gain per moved slot first; free moves always pass
        for index in np.argsort(-move["gain"] / np.maximum(move["cost"], 0.5), kind="stable"):
            if is_good[index] and move["cost"][index] <= budget:
                taken[index] = True
                budget -= move["cost"][index]
            elif is_good[index]:
                is_active[layers[index]] = False
        _apply(move, taken, layers, table, counts, is_on_gpu, slot_gpu)
        changed = layers[taken]
        counts[changed] = _counts(table[changed], load.shape[1])
        slot_load[changed] = _slot_loads(table[changed], load[changed], counts[changed])
        gpu_load[changed] = slot_load[changed].reshape(len(changed), num_gpus, slots_per_gpu).sum(axis=2)
    return table


def _best_moves(layers, table, load, counts, slot_load, gpu_load, is_on_gpu, slots_per_gpu, num_partners,
                num_spares, expert_node, gpus_per_node, current) -> dict[str, np.ndarray]:
    """One best move per active layer: which slots, the new experts, its gain and its cost."""
    n, k = len(layers), slots_per_gpu
    rows = np.arange(n)[:, None]
    tbl, sl, gl, cnt, w, on = (table[layers], slot_load[layers], gpu_load[layers], counts[layers],
                               load[layers], is_on_gpu[layers])
    hot = gl.argmax(axis=1)
    hot_load = gl[np.arange(n), hot]
    hot_slots = hot[:, None] * k + np.arange(k)                          # [n, k]
    hot_expert, hot_replica = tbl[rows, hot_slots], sl[rows, hot_slots]  # [n, k]
    # candidates: slots on the lightest GPUs (best swap partners) and the spare replicas that
    # are cheapest to give up (best retarget sources, often on mid-loaded GPUs)
    partner_gpu = np.argsort(gl, axis=1, kind="stable")[:, :num_partners]
    on_light = (partner_gpu[:, :, None] * k + np.arange(k)).reshape(n, -1)
    with np.errstate(divide="ignore"):
        spare_cost = np.where(np.take_along_axis(cnt, tbl, axis=1) >= 2,
                              np.take_along_axis(w, tbl, axis=1) / (np.take_along_axis(cnt, tbl, axis=1) - 1)
                              + gl[:, np.arange(tbl.shape[1]) // k], np.inf)
    cheap_spare = np.argsort(spare_cost, axis=1, kind="stable")[:, :num_spares]
    cand = np.concatenate([on_light, cheap_spare], axis=1)               # [n, c]
    cand_gpu = cand // k
    cand_expert, cand_replica = tbl[rows, cand], sl[rows, cand]          # [n, c]
    cand_gpu_load = gl[rows, cand_gpu]
    hot_has_cand = np.take_along_axis(on[np.arange(n), hot], cand_expert, axis=1)  # [n, c]
    cand_has_hot = on[rows[:, :, None], cand_gpu[:, None, :], hot_expert[:, :, None]]  # [n, k, c]
    # group locality: the hot expert may only land on its node; a swapped cand expert likewise
    is_hot_local = np.ones((n, k, cand.shape[1]), dtype=bool)
    is_cand_local = np.ones((n, 1, cand.shape[1]), dtype=bool)
    if expert_node is not None:
        node_of = expert_node[layers]
        hot_home, cand_home = node_of[rows, hot_expert][:, :, None], node_of[rows, cand_expert]
        is_hot_local = (hot_home < 0) | (hot_home == (cand_gpu // gpus_per_node)[:, None, :])
        is_cand_local = ((cand_home < 0) | (cand_home == (hot // gpus_per_node)[:, None]))[:, None, :]

    # swap hot_expert[i] <-> cand_expert[j]
    delta = hot_replica[:, :, None] - cand_replica[:, None, :]
    swap_value = np.maximum(hot_load[:, None, None] - delta, cand_gpu_load[:, None, :] + delta)
    is_blocked = cand_has_hot | hot_has_cand[:, None, :] | ~is_hot_local | ~is_cand_local
    swap_value[(delta <= 0) | is_blocked] = np.inf

    # retarget cand slot j (expert a, with spares) to one more replica of hot_expert[i]
    hot_total, hot_count = w[rows, hot_expert], cnt[rows, hot_expert]
    new_hot_replica = hot_total / (hot_count + 1)
    cand_total, cand_count = w[rows, cand_expert], cnt[rows, cand_expert]
    with np.errstate(divide="ignore", invalid="ignore"):
        spare_rise = np.where(cand_count >= 2, cand_total / (cand_count - 1) - cand_replica, np.inf)
    max_load_holding = np.full(w.shape, -np.inf)  # [n, E] load of the busiest GPU holding each expert
    slot_gpu_load = gl[:, np.arange(tbl.shape[1]) // k]
    np.maximum.at(max_load_holding, (np.broadcast_to(rows, tbl.shape), tbl), slot_gpu_load)
    cand_expert_peak = np.take_along_axis(max_load_holding, cand_expert, axis=1) + spare_rise
    retarget_value = np.maximum.reduce([
        np.broadcast_to(cand_expert_peak[:, None, :], delta.shape),
        cand_gpu_load[:, None, :] - cand_replica[:, None, :] + new_hot_replica[:, :, None],
        np.broadcast_to((hot_load[:, None] - hot_replica + new_hot_replica)[:, :, None], delta.shape),
    ])
    retarget_value[cand_has_hot | (cand_count[:, None, :] < 2) | ~is_hot_local] = np.inf

    gain = hot_load[:, None] - np.stack([swap_value, retarget_value], axis=1).reshape(n, -1)
    cost = np.zeros_like(gain)
    if current is not None:
        # cost: change in the number of slots that differ from the applied table
        cur = current[layers]
        cur_hot, cur_cand = cur[rows, hot_slots], cur[rows, cand]
        hot_was, cand_was = (hot_expert != cur_hot)[:, :, None], (cand_expert != cur_cand)[:, None, :]
        hot_now = cand_expert[:, None, :] != cur_hot[:, :, None]
        cand_now = hot_expert[:, :, None] != cur_cand[:, None, :]
        swap_cost = hot_now.astype(int) + cand_now - hot_was - cand_was
        retarget_cost = cand_now.astype(int) - cand_was
        cost = np.stack([swap_cost, retarget_cost], axis=1).reshape(n, -1).astype(float)
    # best gain per moved slot; without a current table every move is free, so the best gain
    score = np.where(gain > 0, gain / np.maximum(cost, 0.5), -np.inf)
    best = score.argmax(axis=1)
    kind, hot_index, cand_index = np.unravel_index(best, (2, k, cand.shape[1]))
    r = np.arange(n)
    move = {"kind": kind, "hot_slot": hot_slots[r, hot_index], "cand_slot": cand[r, cand_index],
            "hot_expert": hot_expert[r, hot_index], "cand_expert": cand_expert[r, cand_index],
            "gain": np.maximum(gain[r, best], 0.0), "cost": cost[r, best]}
    return move


def _apply(move, taken, layers, table, counts, is_on_gpu, slot_gpu) -> None:
    for index in np.flatnonzero(taken):
        layer = layers[index]
        hot_slot, cand_slot = move["hot_slot"][index], move["cand_slot"][index]
        hot_expert, cand_expert = move["hot_expert"][index], move["cand_expert"][index]
        hot_gpu, cand_gpu = slot_gpu[hot_slot], slot_gpu[cand_slot]
        table[layer, cand_slot] = hot_expert
        is_on_gpu[layer, cand_gpu, cand_expert] = False
        is_on_gpu[layer, cand_gpu, hot_expert] = True
        if move["kind"][index] == 0:
            table[layer, hot_slot] = cand_expert
            is_on_gpu[layer, hot_gpu, hot_expert] = False
            is_on_gpu[layer, hot_gpu, cand_expert] = True
