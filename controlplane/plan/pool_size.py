"""A pool size a person asks for, checked: pure. Within the policy's replica bounds for the pool's role and its
GPU budget (the pool planner's own sizes are planned in controlplane/plan/pools.py)."""

from __future__ import annotations

from controlplane.desired import Mode, Policy, PoolSizeStep, ReplicaBounds


def check_pool_size(policy: Policy, *, role: str, replicas: int, current: int | None, gpus_per_instance: int,
                    other_pools_gpus: int) -> PoolSizeStep:
    """Whether a pool may run `replicas` instances: within the policy's bounds for its role, and within the GPU
    budget with the GPUs the other pools use. A policy that names no bounds has `ReplicaBounds`' defaults.
    gpus_per_instance: GPUs one instance uses (its EP size)."""

    def step(is_allowed: bool, reason: str) -> PoolSizeStep:
        return PoolSizeStep(replicas, current, is_allowed, reason)

    if policy.mode == Mode.off:
        return step(False, "policy mode is off")
    bounds = policy.replicas.get(role, ReplicaBounds())
    if not bounds.min <= replicas <= bounds.max:
        return step(False, f"{replicas} replicas is outside the policy's bounds for {role}: "
                           f"min {bounds.min}, max {bounds.max}")
    gpus = replicas * gpus_per_instance + other_pools_gpus
    if policy.gpu_budget is not None and gpus > policy.gpu_budget:
        return step(False, f"{replicas} replicas x {gpus_per_instance} GPUs + {other_pools_gpus} GPUs of the other "
                           f"pools = {gpus} GPUs, over the policy's gpu_budget {policy.gpu_budget}")
    if replicas == current:
        return step(True, f"{role} already runs {replicas} replicas")
    return step(True, f"{current if current is not None else 'unsized'} -> {replicas} replicas "
                      f"({gpus} GPUs of the budget {policy.gpu_budget or 'unbounded'})")
