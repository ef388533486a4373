"""The engine ops table picks the split's kernel or its torch twin (the pair itself: test_kernel_pairs)."""

import pytest
import torch

pytest.importorskip("triton")

from agents.runtime import replica_split  # noqa: E402
from agents.runtime.kernels import get_ops, load  # noqa: E402


def test_the_engine_ops_pick_the_kernel_when_forced(monkeypatch):
    monkeypatch.setenv("MOECTL_KERNELS", "triton")
    assert get_ops("cpu").balance_split is load("replica_split").triton_impl
    monkeypatch.setenv("MOECTL_KERNELS", "torch")
    assert get_ops("cpu").balance_split is replica_split.balance_split


def test_the_kernel_places_every_token_of_each_expert():
    kernel = load("replica_split")
    for shape in ({}, dict(num_gpus=8, slots_per_gpu=2, num_experts=12, num_rows=3, max_count=3000)):
        counts, gpus, share, num_gpus = kernel.make_inputs(0, **shape)
        tokens = kernel.triton_impl(counts, gpus, share, num_gpus)
        assert (tokens >= 0).all() and torch.equal(tokens.sum(-1), counts)
