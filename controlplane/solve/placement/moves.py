"""Candidate moves that relieve a layer's most loaded ("hot") GPU, scored for every active layer at once.

There are three kinds. Each rewrites at most two slots and keeps every expert present with no duplicate on a GPU.
1. Swap: exchange a replica on the hot GPU with a lighter replica on another GPU.
2. Retarget: turn a spare replica of expert a (a has >= 2) into one more replica of hot expert h.
3. Chain: the compound move a retarget needs when every spare sits on a GPU that already holds h.
   Slot x on light GPU t holds b; spare slot y of expert a sits on GPU u. Then y <- b and x <- h:
   b relocates into the freed spare, h gains a replica on t. Without it the search stalls as soon as
   all spares share GPUs with the hot experts (the agents' default table does exactly that).
Values are the largest load among the GPUs a move touches (conservative where exactness is costly);
gain is the hot GPU's load minus that value. Shapes: n active layers, k slots per GPU, G GPUs,
E experts, S slots, c swap/retarget candidates, H hot experts, C light slots, P spare slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.solve.placement.locality import Locality

NUM_KINDS = 3
SWAP, RETARGET, CHAIN = range(NUM_KINDS)


@dataclass(frozen=True)
class SearchArrays:
    """A table's numbers the local search keeps current as it moves slots, per layer (updated in place)."""

    table: np.ndarray  # [L, S] slot -> expert
    load: np.ndarray  # [L, E] tokens
    counts: np.ndarray  # [L, E] replicas per expert
    slot_load: np.ndarray  # [L, S] tokens, on an even split
    gpu_load: np.ndarray  # [L, G] tokens
    is_on_gpu: np.ndarray  # [L, G, E]
    slots_per_gpu: int


def best_moves(layers: np.ndarray, arrays: SearchArrays, locality: Locality | None, current: np.ndarray | None,
               num_partners: int, num_spares: int, min_gain: np.ndarray) -> dict[str, np.ndarray]:
    """One best move per active layer: kind, up to two (slot, new expert) writes, gain and cost.

    Slots not written are -1. Cost is the change in slots differing from `current` (0 without it).
    min_gain: [L] smallest useful gain per moved slot, in tokens; chains are tried only below it.
    """
    n, k = len(layers), arrays.slots_per_gpu
    rows = np.arange(n)[:, None]
    # is_on_gpu [L, G, E] is read in place through on_rows: a copy of its active rows cost more than a round
    tbl, sl, gl = arrays.table[layers], arrays.slot_load[layers], arrays.gpu_load[layers]
    cnt, w = arrays.counts[layers], arrays.load[layers]
    cur = None if current is None else current[layers]
    node_of, gpus_per_node = (None, 1) if locality is None else (locality.expert_node[layers], locality.gpus_per_node)
    num_slots = tbl.shape[1]
    hot = gl.argmax(axis=1)
    hot_load = gl[np.arange(n), hot]
    hot_slots = hot[:, None] * k + np.arange(k)                          # [n, k]
    partner_gpu = _lightest(gl, num_partners)
    on_light = (partner_gpu[:, :, None] * k + np.arange(k)).reshape(n, -1)  # [n, C]
    slot_count = np.take_along_axis(cnt, tbl, axis=1)
    slot_gpu_load = gl[:, np.arange(num_slots) // k]
    # spares that are cheapest to give up: low load after losing one replica, on a light GPU
    with np.errstate(divide="ignore", invalid="ignore"):
        spare_cost = np.where(slot_count >= 2, np.take_along_axis(w, tbl, axis=1) / (slot_count - 1)
                              + slot_gpu_load, np.inf)
    cheap_spare = np.argpartition(spare_cost, num_spares - 1, axis=1)[:, :num_spares]  # [n, P], any order
    ctx = dict(n=n, k=k, rows=rows, tbl=tbl, sl=sl, gl=gl, cnt=cnt, w=w, on=arrays.is_on_gpu, on_rows=layers[:, None],
               cur=cur, node_of=node_of, hot=hot, hot_load=hot_load, gpus_per_node=gpus_per_node)
    move = _pick(_swap_and_retarget(ctx, hot_slots, np.concatenate([on_light, cheap_spare], axis=1)))
    # chains cost a 4-D candidate array, so only layers that simple moves cannot help pay for them
    is_stuck = move["gain"] <= min_gain[layers] * np.maximum(move["cost"], 1)
    if is_stuck.any():
        sub = {f: (v[is_stuck] if f != "on" and isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v)
               for f, v in ctx.items()}
        sub["n"], sub["rows"] = int(is_stuck.sum()), np.arange(int(is_stuck.sum()))[:, None]
        chain = _pick(_chain(sub, hot_slots[is_stuck], on_light[is_stuck], cheap_spare[is_stuck]))
        is_better = chain["gain"] / np.maximum(chain["cost"], 0.5) > \
            move["gain"][is_stuck] / np.maximum(move["cost"][is_stuck], 0.5)
        for field, values in move.items():
            values[np.flatnonzero(is_stuck)[is_better]] = chain[field][is_better]
    return move


def _lightest(gpu_load: np.ndarray, num: int) -> np.ndarray:
    """[n, num] indices of the num lightest of gpu_load [n, G], lightest first, ties to the lower index:
    np.argsort(gpu_load, kind="stable")[:, :num] without sorting all G."""
    cutoff = np.partition(gpu_load, num - 1, axis=1)[:, num - 1:num]
    is_tie = gpu_load == cutoff
    num_open = num - (gpu_load < cutoff).sum(axis=1, keepdims=True)
    is_chosen = (gpu_load < cutoff) | (is_tie & (np.cumsum(is_tie, axis=1) <= num_open))
    chosen = np.nonzero(is_chosen)[1].reshape(len(gpu_load), num)
    order = np.argsort(np.take_along_axis(gpu_load, chosen, axis=1), axis=1, kind="stable")
    return np.take_along_axis(chosen, order, axis=1)


def _pick(candidates: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """[n, m] gain and cost -> [n] best move per layer by gain per moved slot (best gain when free).

    Only the chosen candidates are decoded into slots and experts: materialising them all cost more
    than scoring them.
    """
    gain, cost = candidates["gain"], candidates["cost"]
    score = np.where(gain > 0, gain / np.maximum(cost, 0.5), -np.inf)
    best = score.argmax(axis=1)
    r = np.arange(len(best))
    move = candidates["decode"](best)
    move["cost"] = cost[r, best]
    move["gain"] = np.maximum(gain[r, best], 0.0)
    return move


def _swap_and_retarget(ctx, hot_slots, cand) -> dict[str, np.ndarray]:
    """Swap hot slot i with candidate slot j, or retarget j to hot expert i. Arrays [n, 2*k*c]."""
    n, k, rows, tbl, sl, gl, cnt, w, on = (ctx[f] for f in ("n", "k", "rows", "tbl", "sl", "gl", "cnt", "w", "on"))
    hot, hot_load, on_rows = ctx["hot"], ctx["hot_load"], ctx["on_rows"]
    hot_expert, hot_replica = tbl[rows, hot_slots], sl[rows, hot_slots]  # [n, k]
    cand_gpu = cand // k
    cand_expert, cand_replica = tbl[rows, cand], sl[rows, cand]          # [n, c]
    cand_gpu_load = gl[rows, cand_gpu]
    hot_has_cand = np.take_along_axis(on[on_rows[:, 0], hot], cand_expert, axis=1)  # [n, c]
    cand_has_hot = on[on_rows[:, :, None], cand_gpu[:, None, :], hot_expert[:, :, None]]  # [n, k, c]
    is_swap_blocked = cand_has_hot | hot_has_cand[:, None, :]              # [n, k, c]
    is_retarget_blocked = cand_has_hot | (cnt[rows, cand_expert] < 2)[:, None, :]
    if ctx["node_of"] is not None:
        node_of, gpn = ctx["node_of"], ctx["gpus_per_node"]
        hot_home, cand_home = node_of[rows, hot_expert][:, :, None], node_of[rows, cand_expert]
        is_hot_far = (hot_home >= 0) & (hot_home != (cand_gpu // gpn)[:, None, :])
        is_cand_far = ((cand_home >= 0) & (cand_home != (hot // gpn)[:, None]))[:, None, :]
        is_swap_blocked = is_swap_blocked | is_hot_far | is_cand_far
        is_retarget_blocked = is_retarget_blocked | is_hot_far

    delta = hot_replica[:, :, None] - cand_replica[:, None, :]
    swap_value = np.maximum(hot_load[:, None, None] - delta, cand_gpu_load[:, None, :] + delta)
    swap_value[(delta <= 0) | is_swap_blocked] = np.inf

    hot_total, hot_count = w[rows, hot_expert], cnt[rows, hot_expert]
    new_hot_replica = hot_total / (hot_count + 1)
    cand_total, cand_count = w[rows, cand_expert], cnt[rows, cand_expert]
    with np.errstate(divide="ignore", invalid="ignore"):
        spare_rise = np.where(cand_count >= 2, cand_total / np.maximum(cand_count - 1, 1) - cand_replica, np.inf)
    if k == 1:
        # a GPU's load is its one replica's, and every replica of an expert takes the same even split
        cand_expert_peak = cand_gpu_load + spare_rise
    else:
        # the busiest GPU holding each candidate's expert ([n, c, G] masked; a ufunc.at over all slots cost more)
        holds = np.swapaxes(ctx["on"], 1, 2)[on_rows, cand_expert]
        cand_expert_peak = np.where(holds, gl[:, None, :], -np.inf).max(axis=2) + spare_rise
    retarget_value = np.maximum.reduce([
        np.broadcast_to(cand_expert_peak[:, None, :], delta.shape),
        cand_gpu_load[:, None, :] - cand_replica[:, None, :] + new_hot_replica[:, :, None],
        np.broadcast_to((hot_load[:, None] - hot_replica + new_hot_replica)[:, :, None], delta.shape),
    ])
    retarget_value[is_retarget_blocked] = np.inf

    shape = delta.shape
    cost = np.zeros((n, 2) + shape[1:])
    if ctx["cur"] is not None:
        cur = ctx["cur"]
        cur_hot, cur_cand = cur[rows, hot_slots], cur[rows, cand]
        hot_was, cand_was = (hot_expert != cur_hot)[:, :, None], (cand_expert != cur_cand)[:, None, :]
        hot_now = cand_expert[:, None, :] != cur_hot[:, :, None]
        cand_now = hot_expert[:, :, None] != cur_cand[:, None, :]
        cost[:, 0] = hot_now.astype(int) + cand_now - hot_was - cand_was
        cost[:, 1] = cand_now.astype(int) - cand_was

    def decode(best: np.ndarray) -> dict[str, np.ndarray]:
        r = np.arange(n)
        kind, i, j = np.unravel_index(best, (2, k, cand.shape[1]))
        is_swap = kind == SWAP
        return {"kind": kind, "slot1": cand[r, j], "expert1": hot_expert[r, i],
                "slot2": np.where(is_swap, hot_slots[r, i], -1), "expert2": np.where(is_swap, cand_expert[r, j], -1)}

    gain = np.empty((n, 2) + shape[1:])
    np.subtract(hot_load[:, None, None], swap_value, out=gain[:, SWAP])
    np.subtract(hot_load[:, None, None], retarget_value, out=gain[:, RETARGET])
    return {"gain": gain.reshape(n, -1), "cost": cost.reshape(n, -1), "decode": decode}


def _chain(ctx, hot_slots, light, spare, num_hot: int = 2) -> dict[str, np.ndarray]:
    """Chain moves y <- b, x <- h over the hottest experts h on the hot GPU. Arrays [n, H*C*P]."""
    n, k, rows, tbl, sl, gl, cnt, w, on = (ctx[f] for f in ("n", "k", "rows", "tbl", "sl", "gl", "cnt", "w", "on"))
    hot, hot_load, on_rows = ctx["hot"], ctx["hot_load"], ctx["on_rows"]
    num_hot = min(num_hot, k)
    on3 = on_rows[:, :, None]
    # the hot GPU's experts with the largest per-replica load gain most from one more replica
    top = np.argsort(-sl[rows, hot_slots], axis=1, kind="stable")[:, :num_hot]
    h = tbl[rows, np.take_along_axis(hot_slots, top, axis=1)]         # [n, H]
    hr = sl[rows, np.take_along_axis(hot_slots, top, axis=1)]
    nh = w[rows, h] / (cnt[rows, h] + 1)
    b, bl, t = tbl[rows, light], sl[rows, light], light // k          # [n, C]
    a, sa, u = tbl[rows, spare], sl[rows, spare], spare // k          # [n, P]
    ca = cnt[rows, a]
    with np.errstate(divide="ignore", invalid="ignore"):
        # a spare-less a is blocked below; 0 keeps the arithmetic finite meanwhile
        ra = np.where(ca >= 2, w[rows, a] / np.maximum(ca - 1, 1) - sa, 0.0)
    u_is_hot = u == hot[:, None]
    hot_has_a = on[on_rows, hot[:, None], a] & ~u_is_hot              # [n, P]
    t_has_a = on[on3, t[:, :, None], a[:, None, :]]                   # [n, C, P]
    t_has_h = on[on3, t[:, None, :], h[:, :, None]]                   # [n, H, C]
    u_has_b = on[on3, u[:, None, :], b[:, :, None]]                   # [n, C, P]
    u_has_h = on[on3, u[:, None, :], h[:, :, None]]                   # [n, H, P]
    # busiest other holder of a: top two holders, excluding u and the hot GPU (both handled exactly)
    holders = np.swapaxes(on, 1, 2)[on_rows, a]                       # [n, P, G]
    holders[np.arange(n)[:, None], np.arange(a.shape[1]), u] = False
    holders[np.arange(n), :, hot] = False
    holder_load = np.where(holders, gl[:, None, :], -np.inf)
    first = holder_load.argmax(axis=2)
    top1 = np.take_along_axis(holder_load, first[:, :, None], axis=2)[:, :, 0]
    np.put_along_axis(holder_load, first[:, :, None], -np.inf, axis=2)
    top2 = holder_load.max(axis=2)
    a_peak = np.where(first[:, None, :] == t[:, :, None], top2[:, None, :], top1[:, None, :]) + ra[:, None, :]

    hot_new = (hot_load[:, None, None, None] - (hr - nh)[:, :, None, None]
               + np.where(u_is_hot[:, None, :], bl[:, :, None] - sa[:, None, :], 0)[:, None]
               + np.where(hot_has_a, ra, 0)[:, None, None, :])
    t_new = (gl[rows, t] - bl)[:, None, :, None] + nh[:, :, None, None] + np.where(t_has_a, ra[:, None, :], 0)[:, None]
    u_new = (gl[rows, u] - sa)[:, None, None, :] + bl[:, None, :, None] \
        - np.where(u_has_h, (hr - nh)[:, :, None], 0)[:, :, None, :]
    u_new = np.where(u_is_hot[:, None, None, :], -np.inf, u_new)
    value = np.maximum(np.maximum(hot_new, t_new), np.maximum(u_new, a_peak[:, None]))
    is_blocked = (t_has_h[:, :, :, None] | u_has_b[:, None] | (a[:, None, None, :] == h[:, :, None, None])
                  | (a[:, None, :] == b[:, :, None])[:, None] | (ca < 2)[:, None, None, :])
    if ctx["node_of"] is not None:
        node_of, gpn = ctx["node_of"], ctx["gpus_per_node"]
        h_home, b_home = node_of[rows, h], node_of[rows, b]
        is_h_far = (h_home[:, :, None] >= 0) & (h_home[:, :, None] != (t // gpn)[:, None, :])    # [n, H, C]
        is_b_far = (b_home[:, :, None] >= 0) & (b_home[:, :, None] != (u // gpn)[:, None, :])    # [n, C, P]
        is_blocked = is_blocked | is_h_far[:, :, :, None] | is_b_far[:, None]
    value[is_blocked] = np.inf
    shape = value.shape
    cost = np.zeros(shape)
    if ctx["cur"] is not None:
        cur = ctx["cur"]
        cur_x, cur_y = cur[rows, light], cur[rows, spare]                # [n, C], [n, P]
        cost = ((h[:, :, None] != cur_x[:, None, :]).astype(int) - (b != cur_x)[:, None, :])[:, :, :, None] \
            + ((b[:, :, None] != cur_y[:, None, :]).astype(int) - (a != cur_y)[:, None, :])[:, None]

    def decode(best: np.ndarray) -> dict[str, np.ndarray]:
        r = np.arange(n)
        i, j, m = np.unravel_index(best, shape[1:])
        return {"kind": np.full(n, CHAIN), "slot1": light[r, j], "expert1": h[r, i], "slot2": spare[r, m],
                "expert2": b[r, j]}

    gain = hot_load[:, None, None, None] - value
    return {"gain": gain.reshape(n, -1), "cost": np.broadcast_to(cost, shape).reshape(n, -1).astype(float),
            "decode": decode}
