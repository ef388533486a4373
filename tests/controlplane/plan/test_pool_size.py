"""A pool size a person asks for, checked (controlplane/plan/pool_size.py): within the role's replica bounds and
the GPU budget with the other pools' GPUs, refused with the numbers that broke it."""

from __future__ import annotations

import pytest

from controlplane.desired import Mode, Policy, ReplicaBounds
from controlplane.plan.pool_size import check_pool_size

POLICY = Policy(mode=Mode.auto, gpu_budget=16, replicas={"decode": ReplicaBounds(min=1, max=4)})


def check(replicas: int, current: int | None = 2, *, policy: Policy = POLICY, role: str = "decode"):
    return check_pool_size(policy, role=role, replicas=replicas, current=current, gpus_per_instance=2,
                           other_pools_gpus=8)


@pytest.mark.parametrize("replicas, is_allowed, words", [
    (3, True, "2 -> 3 replicas (14 GPUs of the budget 16)"),
    (4, True, "16 GPUs"),  # exactly the budget
    (2, True, "already runs 2 replicas"),
    (5, False, "outside the policy's bounds for decode: min 1, max 4"),
    (0, False, "outside the policy's bounds"),
])
def test_a_size_within_the_roles_bounds_and_the_budget_is_allowed(replicas, is_allowed, words):
    step = check(replicas)
    assert step.is_allowed is is_allowed and words in step.reason


def test_the_gpu_budget_counts_the_other_pools():
    over = check(4, policy=Policy(mode=Mode.auto, gpu_budget=15, replicas=POLICY.replicas))
    assert not over.is_allowed and "= 16 GPUs, over the policy's gpu_budget 15" in over.reason


def test_a_role_the_policy_does_not_bound_has_the_default_bounds_and_off_refuses_all():
    assert check(8, None, role="prefill", policy=Policy(mode=Mode.auto)).is_allowed
    assert "unsized -> 8" in check(8, None, role="prefill", policy=Policy(mode=Mode.auto)).reason
    assert not check(9, role="prefill", policy=Policy(mode=Mode.auto)).is_allowed  # ReplicaBounds().max is 8
    assert check(3, policy=Policy(mode=Mode.off)).reason == "policy mode is off"
