"""int8 per-token dispatch quantisation: the stated error bound holds for both paths, and the wire is smaller."""

import pytest
import torch

from agents.runtime.kernels import refs

UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11}


def check_bound(x, q, scale, out):
    """|x_hat - x| <= scale / 2 * (1 + 2^-20) + |x| * u_out (the bound in quant.py's docstring)."""
    group = x.shape[1] // scale.shape[1]
    s = scale.repeat_interleave(group, dim=1)  # [M, D]
    err = (out.float() - x.float()).abs()
    bound = s / 2 * (1 + 2.0**-20) + x.float().abs() * UNIT_ROUNDOFF[out.dtype]
    assert (err <= bound).all(), float((err - bound).max())
    assert q.abs().max() <= 127
    # the bound is not vacuous: the worst element uses a good part of it
    assert (err / bound.clamp_min(1e-30)).max() > 0.4


def make_x(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 256, generator=g) * torch.logspace(-3, 3, 16)[:, None]
    x[0] = 0.0
    x[1, 5] = 1e4  # one outlier only coarsens its own 128-channel group
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reference_error_bound(dtype):
    x = make_x(dtype)
    q, scale = refs.quantize(x)
    assert q.dtype == torch.int8 and scale.shape == (16, 2) and scale.dtype == torch.float32
    check_bound(x, q, scale, refs.dequantize(q, scale, dtype))
    assert scale[0].eq(0).all() and q[0].eq(0).all()
    assert scale[1, 1] < scale[1, 0] / 100  # the outlier's group does not set the other group's scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_error_bound_and_roundtrip(dtype):
    pytest.importorskip("triton")
    from agents.runtime.kernels import quant

    x = make_x(dtype, seed=1)
    q, scale = quant.triton_impl(x)
    out = quant.dequantize_triton(q, scale, dtype)
    check_bound(x, q, scale, out)
    assert torch.equal(out, refs.dequantize(q, scale, dtype))
    q2, scale2 = quant.triton_impl(refs.dequantize(q, scale, torch.float32))  # codes survive a second pass
    assert (q2.int() - q.int()).abs().max() <= 1
    torch.testing.assert_close(scale2, scale)


def test_pack_halves_bf16_bytes():
    x = make_x(torch.bfloat16)[:, :].repeat(1, 28)  # [16, 7168], DeepSeek-V3 hidden size
    q, scale = refs.quantize(x)
    buf = refs.pack(q, scale)
    assert buf.dtype == torch.int8
    assert buf.numel() * buf.element_size() <= 0.52 * x.numel() * x.element_size()
    q2, scale2 = refs.unpack(buf, x.shape[1])
    assert torch.equal(q2, q) and torch.equal(scale2, scale)
