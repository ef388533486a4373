"""What a change is priced at (controlplane/plan/change_cost.py): the measure once there is one
(tests/controlplane/observed/test_measured_cost.py folds it), else the engine's prior."""

from __future__ import annotations

from controlplane.observed.measured_cost import MeasuredCost
from controlplane.plan.change_cost import change_cost
from controlplane.plan.change_price import ENGINE_PRIORS


def test_a_change_is_priced_at_the_measure_once_there_is_one():
    assert change_cost("sglang", None) == ENGINE_PRIORS["sglang"]
    assert change_cost("unknown", None) == ENGINE_PRIORS["bundled"]
    cost = change_cost("bundled", MeasuredCost(8, 0.3, 0.4, 7))
    assert cost.stall_seconds == 0.3 and cost.source == "measured: mean of 8 placement switches on this deployment"
    # vLLM's plugin times its policy's call, not the weight transfer after it: the prior stays, the call adds
    vllm = change_cost("vllm", MeasuredCost(3, 0.02, 0.02, 7))
    assert vllm.stall_seconds == ENGINE_PRIORS["vllm"].stall_seconds + 0.02
    assert vllm.source.startswith("prior: ") and "policy's call measured here" in vllm.source
