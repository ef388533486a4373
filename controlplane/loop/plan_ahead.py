"""Planning a pool before taking its lock, where the lock stops everything else (SQLite).

On SQLite `store.deployments.lock_pool` is the database's one write lock: held while the planner solves a
DeepSeek-sized pool (seconds), every agent's post waits behind it. So the loop first plans the pool with a
dry run (no lock, no write) through a `PlannedAhead` compute, then reconciles it for real under the lock
through the same one. If the inputs of the planner's call under the lock (policy, state, clock, flags) are
equal to the dry run's, it is answered with the plan already made. If anything changed meanwhile (a window
completed by a late post, an action verified, a request arrived), it is planned again, under the lock. Either
way the plan is the one `plan.decisions.decide` gives for what is stored when the lock is held.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from controlplane.loop.compute import Compute

T = TypeVar("T")


class PlannedAhead:
    """A `Compute` that remembers what it computed and answers a call equal to an earlier one from memory
    (`is_same`: arrays by value). One per pool and pass: it holds that pool's plans only."""

    def __init__(self, compute: Compute):
        self.compute = compute
        self.made: list[tuple[Callable[..., Any], tuple, dict, Any]] = []
        self.num_reused = 0

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        for made_fn, made_args, made_kwargs, result in self.made:
            if made_fn is fn and is_same(made_args, args) and is_same(made_kwargs, kwargs):
                self.num_reused += 1
                return result
        result = self.compute(fn, *args, **kwargs)
        self.made.append((fn, args, kwargs, result))
        return result


def is_same(a: Any, b: Any) -> bool:
    """Equal values: arrays by dtype, shape and elements; dataclasses, tuples, lists and dicts item by item;
    anything else by ==."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and \
            a.shape == b.shape and bool(np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(is_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(is_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(is_same(a[k], b[k]) for k in a)
    return bool(a == b)
