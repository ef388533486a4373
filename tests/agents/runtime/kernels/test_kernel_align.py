"""The kernel-shaped alignment (refs.align_block_size / align.triton_impl) agrees with moe_ops.permute, and the
fused path built on it agrees with the moe_ops chain."""

import pytest
import torch

pytest.importorskip("triton")

from agents.runtime import moe_ops  # noqa: E402
from agents.runtime.kernels import align, fused_moe, grouped_gemm, refs  # noqa: E402


@pytest.mark.parametrize("impl", [refs.align_block_size, align.triton_impl], ids=["ref", "triton"])
@pytest.mark.parametrize("block_m", [1, 16])
def test_alignment_is_permute_with_padding(impl, block_m):
    num_bins = 12
    ids, _, _ = align.make_inputs(3, num_tokens=45, top_k=3, num_bins=num_bins, block_m=block_m)
    ids[ids == 5] = 6  # bin 5 empty
    sorted_ids, block_bins, num_post_pad = impl(ids, num_bins, block_m)
    order, counts = moe_ops.permute(ids, num_bins)
    n = ids.numel()
    used = int(num_post_pad)
    assert used % block_m == 0 and (sorted_ids[used:] == n).all()
    assert torch.equal(sorted_ids[sorted_ids < n].long(), order[: int(counts.sum())])  # same order, no sentinels
    flat = ids.flatten()
    for blk in range(used // block_m):
        rows = sorted_ids[blk * block_m : (blk + 1) * block_m].long()
        rows = rows[rows < n]
        assert rows.numel() > 0  # no empty blocks: the grid bound N >= used blocks relies on it
        assert (flat[rows] == block_bins[blk]).all()  # one expert per block
    padded = (counts + block_m - 1) // block_m * block_m
    assert used == int(padded.sum())


def test_alignment_all_dropped():
    ids = torch.full((4, 2), -1)
    sorted_ids, _, num_post_pad = align.triton_impl(ids, 8, 16)
    assert int(num_post_pad) == 0 and (sorted_ids == ids.numel()).all()
    x, w, _, w13, w2 = fused_moe.make_inputs(0, num_tokens=4, top_k=2)
    out = fused_moe.triton_impl(x, torch.zeros(4, 2), ids, w13, w2)
    assert torch.equal(out, torch.zeros_like(out))


def test_grouped_swiglu_zero_rows():
    x, counts, w13, w2 = grouped_gemm.make_inputs(0)
    out = grouped_gemm.triton_impl(x[:0], torch.zeros_like(counts), w13, w2)
    assert out.shape == (0, x.shape[1])


def test_swiglu_experts_weighted_rows_match_moe_ops():
    # the kernel path applies the routing weight inside the down GEMM; moe_ops applies it in combine
    x, weights, ids, w13, w2 = fused_moe.make_inputs(4, num_tokens=9, top_k=3)
    y = grouped_gemm.swiglu_experts(x, ids, w13, w2, weights)  # [N, D]
    order, counts = moe_ops.permute(ids, w13.shape[0])
    want = moe_ops.unpermute(moe_ops.grouped_swiglu(x[order // 3], counts, w13, w2), order, ids.numel())
    torch.testing.assert_close(y, want * weights.reshape(-1, 1), atol=1e-5, rtol=1e-5)
