"""`moectl slots`: what each number of slots per GPU would reach on a pool's measured load (solve/placement/shape.py),
beside the policy's threshold: how many redundant experts the pool needs, from its own load."""

from __future__ import annotations

import httpx
import numpy as np

from controlplane.solve.placement.shape import ShapeOption, shape_options


class SlotsError(Exception):
    """What keeps the table from being made, and what to do."""


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(title: str, slots_per_rank: int, threshold: float, options: list[ShapeOption]) -> str:
    met = [o for o in options if o.reached is not None and o.reached <= threshold]
    lines = [title, f"{'slots/GPU':<12} {'redundant':>9} {'floor':>7} {'solved':>7}"]
    for o in options:
        lines.append(f"{str(o.slots_per_gpu) + (' (now)' if o.slots_per_gpu == slots_per_rank else ''):<12} "
                     f"{o.num_redundant:>9} {_fmt(o.floor):>7} {_fmt(o.reached):>7}"
                     + (f"  <= {threshold:g}" if o in met else ""))
    lines.append(f"fewest slots per GPU within the policy's imbalance_threshold {threshold:g}: "
                 + (str(met[0].slots_per_gpu) if met else f"none up to {options[-1].slots_per_gpu}")
                 + "\nfloor: no placement gets under it; solved: the controller's fresh solve of this window's "
                   "load (a loop under drift holds a few points above)")
    return "\n".join(lines)


def slots_report(client: httpx.Client, deployment: str, role: str, max_slots_per_gpu: int | None = None) -> str:
    """The table for one pool, read through `client` (the controller's API); raises SlotsError with what to do."""
    answer = client.get(f"/v1/deployments/{deployment}/pools/{role}/load")
    if answer.status_code == 404:
        raise SlotsError(f"{answer.json()['detail']}; `moectl status` lists what reports")
    load = answer.raise_for_status().json()
    policy = client.get(f"/v1/deployments/{deployment}/policy").raise_for_status().json()["policy"]
    tokens = np.asarray(load["expert_tokens"], dtype=np.float64)
    if tokens.ndim != 2 or tokens.size == 0 or tokens.sum() == 0:
        raise SlotsError(f"{deployment}/{role}: no expert load measured yet; try again once its agents posted a window")
    num_gpus, current = load["ep_size"], load["slots_per_rank"]
    options = shape_options(tokens, num_gpus, max_slots_per_gpu or current + 3)
    return render(f"{deployment}/{role}: {num_gpus} GPUs, {tokens.shape[1]} experts, {tokens.shape[0]} MoE layers; "
                  f"the load of window {load['window_index']}", current, policy["imbalance_threshold"], options)


def print_slots(url: str, deployment: str, role: str, max_slots_per_gpu: int | None = None) -> int:
    with httpx.Client(base_url=url, timeout=30) as client:
        try:
            print(slots_report(client, deployment, role, max_slots_per_gpu))
        except SlotsError as exc:
            print(f"error: {exc}")
            return 1
        except httpx.HTTPError as exc:
            print(f"error: cannot read {url} ({exc}); is the controller running? start it with `moectl up`")
            return 1
    return 0
