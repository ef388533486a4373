"""A planned placement change is made only when it pays: priced from the pool's windows, held otherwise. Pure.

The placement planner (controlplane/plan/placement.py) decides that a change is allowed (thresholds, rails,
budgets, the minimum gain). This prices what it decided (controlplane/plan/change_price.py `price_placement`):
the step time the planned table saves over the one in force, held over how long the hot experts stay hot, against
what one change costs the pool (controlplane/plan/change_cost.py: measured on the deployment, else the engine's
prior). A change that does not pay is not made: the plan becomes a hold that says so, with the price. One that pays
carries its price into the action (`predicted.price`), which the verdict then restates as realised
(`realised_price`). A person's rebalance is priced and made whatever the price: they asked.

Step times: each window's mean step, the ranks' forward seconds over their steps, against its measured max/mean
and its batch (the tokens a step routed).
Without a window that measured both, the change is not priced (the rails alone decide, as before).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.desired import Decision, Plan
from controlplane.observed.pool import PoolState
from controlplane.plan.change_price import ChangeCost, Price, StepModel, price_placement


def step_points(state: PoolState) -> tuple[list[float], list[float], list[float]]:
    """([n] measured max/mean, [n] mean step seconds, [n] token-expert assignments a rank's step routed) of the
    pool's windows under the placement in force that measured all three."""
    imbalances, steps, batches = [], [], []
    for w in state.current_windows():
        imbalance, num_steps = w.imbalance(state.ep_size), w.counters.get("num_steps", 0.0)
        if imbalance is not None and num_steps > 0 and w.counters.get("forward_seconds", 0.0) > 0:
            imbalances.append(imbalance)
            steps.append(w.counters["forward_seconds"] / num_steps)
            batches.append(float(w.expert_tokens.sum()) / num_steps)
    return imbalances, steps, batches


def price_plan(plan: Plan, state: PoolState, cost: ChangeCost, margin: float) -> Price | None:
    """The price of the plan's change; None when it makes none or nothing measured the pool's step times."""
    loaded = [w.expert_tokens for w in state.windows if w.is_loaded]
    if plan.decision != Decision.rebalance or plan.change is None or not loaded:
        return None
    imbalances, steps, batches = step_points(state)
    if not imbalances:
        return None
    planned = PlacementTable(plan.change.slot_to_expert, plan.change.slot_share)
    history = np.stack(loaded)  # [W, L, E], oldest first
    return price_placement(state.placement, planned, history, imbalances, steps, cost,
                           window_seconds=state.windows[-1].seconds, num_gpus=state.ep_size, margin=margin,
                           tokens_per_step=batches)


def priced(plan: Plan, state: PoolState, cost: ChangeCost, margin: float, *, is_asked: bool = False) -> Plan:
    """The plan with its change's price: held when it does not pay (unless a person asked), else carrying it."""
    price = price_plan(plan, state, cost, margin)
    if price is None:
        return plan
    inputs = plan.inputs | {"price": price.to_json()}
    if not price.is_paying and not is_asked:
        return replace(plan, decision=Decision.hold, reason=f"the change does not pay: {price.reason}",
                       inputs=inputs, change=None)
    return replace(plan, inputs=inputs, change=replace(plan.change, price=price.to_json()))


def realised_price(price: dict, imbalance_before: float, imbalance_after: float) -> dict:
    """What a verified change realised against its price: the step-time gain the measured max/mean before (the
    table replaced, on the load the change met) and after give under the same step model, over the same horizon."""
    step = StepModel(price["step_fixed_seconds"], price["step_seconds_per_imbalance"])
    share = step.seconds(imbalance_before) / step.seconds(imbalance_after) - 1.0
    return {"gain_share": round(share, 5), "gain_seconds": round(share * price["horizon_seconds"], 4),
            "is_paying": bool(share * price["horizon_seconds"] >= price["cost_seconds"])}
