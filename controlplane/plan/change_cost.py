"""What one placement change costs a deployment's pool: as measured there (controlplane/observed/measured_cost.py),
else its engine's prior (`ENGINE_PRIORS`, controlplane/plan/change_price.py; docs/reference/loop.md gives their
sources). Pure."""

from __future__ import annotations

from controlplane.observed.measured_cost import MeasuredCost
from controlplane.plan.change_price import ENGINE_PRIORS, ChangeCost

WHAT = {"bundled": "placement switches", "vllm": "rearranges", "sglang": "group restarts"}
# engines whose agents time only part of a change: vLLM's plugin times its policy's call, not the weight transfer
# vLLM makes after it, so the prior stands for the transfer and the measure is added to it
PART_MEASURED = frozenset({"vllm"})


def change_cost(engine: str, measured: MeasuredCost | None) -> ChangeCost:
    """The cost a placement change of the pool is priced at: its measured mean once it has one, else the prior."""
    prior = ENGINE_PRIORS.get(engine, ENGINE_PRIORS["bundled"])
    if measured is None or measured.num_measured <= 0:
        return prior
    if engine in PART_MEASURED:
        return ChangeCost(prior.stall_seconds + measured.mean_seconds,
                          f"{prior.source}; plus the policy's call measured here: mean {measured.mean_seconds:.3f}s "
                          f"of {measured.num_measured} {WHAT[engine]}")
    return ChangeCost(measured.mean_seconds, f"measured: mean of {measured.num_measured} "
                                             f"{WHAT.get(engine, 'changes')} on this deployment")
