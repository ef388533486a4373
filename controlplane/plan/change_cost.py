"""What one placement change costs a deployment's pool: as measured there (controlplane/observed/measured_cost.py),
else its engine's prior (`ENGINE_PRIORS`, controlplane/plan/change_price.py; docs/reference/loop.md gives their
sources). Pure."""

from __future__ import annotations

from controlplane.observed.measured_cost import MeasuredCost
from controlplane.plan.change_price import ENGINE_PRIORS, ChangeCost

WHAT = {"bundled": "placement switches", "vllm": "rearranges", "sglang": "group restarts"}


def change_cost(engine: str, measured: MeasuredCost | None) -> ChangeCost:
    """The cost a placement change of the pool is priced at: its measured mean once it has one, else the prior."""
    if measured is None or measured.num_measured <= 0:
        return ENGINE_PRIORS.get(engine, ENGINE_PRIORS["bundled"])
    return ChangeCost(measured.mean_seconds, f"measured: mean of {measured.num_measured} "
                                             f"{WHAT.get(engine, 'changes')} on this deployment")
