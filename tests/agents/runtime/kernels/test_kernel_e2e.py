"""The runtime with the Triton kernels forced on (interpreter) gives the torch path's output.

`MOECTL_KERNELS` picks the backend the runtime's MoE layers get from `kernels.ops_for`: both MoE paths
are exercised, `moe.MoE.forward` (no EP, model forward) and `ep.ExpertParallel.forward` (the engine).
"""

import contextlib

import pytest
import torch

pytest.importorskip("triton")

from agents.runtime import kernels  # noqa: E402
from agents.runtime.config import EngineConfig, ModelConfig  # noqa: E402
from agents.runtime.model import Transformer  # noqa: E402

COUNTED = ("grouped_topk", "histogram", "permute", "unpermute", "grouped_swiglu", "combine", "reach")
CFG = dict(
    dim=32,
    num_layers=2,
    num_dense_layers=1,
    num_heads=2,
    dense_inter=64,
    shared_inter=32,
    moe_inter=16,
    num_experts=8,
    num_groups=4,
    top_k=2,
    topk_group=2,
    max_seq_len=64,
)


@pytest.fixture
def kernels_on(monkeypatch):
    """Forces the Triton backend and counts its kernel calls; `torch_path()` runs a block on torch."""
    monkeypatch.setenv(kernels.ENV_VAR, "triton")
    triton_ops = kernels.get_ops("cpu")
    assert triton_ops.backend == "triton"
    calls = {name: 0 for name in COUNTED}

    def counting(name, impl):
        def counted(*args, **kwargs):
            calls[name] += 1
            return impl(*args, **kwargs)
        return counted

    for name in COUNTED:
        monkeypatch.setattr(triton_ops, name, counting(name, getattr(triton_ops, name)))
    return calls


@contextlib.contextmanager
def torch_path():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(kernels.ENV_VAR, "torch")
        yield


def make_model(seed=0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**CFG)).eval()
    with torch.no_grad():
        for moe in model.moes:
            moe.bias.copy_(0.05 * torch.randn_like(moe.bias))  # non-trivial selection bias
    return model


def forward_logits(model):
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(tokens)


def test_model_forward_matches(kernels_on):
    model = make_model()
    with torch_path():
        want_main, want_mtp = forward_logits(model)
    got_main, got_mtp = forward_logits(model)
    assert kernels_on["grouped_swiglu"] > 0 and kernels_on["grouped_topk"] > 0
    torch.testing.assert_close(got_main, want_main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_mtp, want_mtp, atol=1e-4, rtol=1e-4)


def generate(model, num_tokens=6):
    from agents.runtime.engine import Engine
    from agents.runtime.sequence import SamplingParams

    engine = Engine(EngineConfig(num_kv_blocks=32, max_num_seqs=4, seed=0), model=model)
    tokens = engine.generate(["def f(x):", "import os"], SamplingParams(max_tokens=num_tokens))
    return tokens, engine.runner.last_logits  # logits of the last step: token equality alone is coarse


def test_engine_generation_matches(kernels_on):
    want = None
    with torch_path():
        want, want_logits = generate(make_model())
    got, got_logits = generate(make_model())
    assert kernels_on["grouped_swiglu"] > 0 and kernels_on["permute"] > 0 and kernels_on["reach"] > 0
    assert got == want and all(len(t) == 6 for t in got)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=1e-4)
