"""The runtime with the Triton kernels swapped in (interpreter) gives the torch path's output.

The runtime calls `moe_ops.<op>` through the module at call time, so patching the module's functions with their
Triton twins exercises both MoE paths without touching runtime files: `moe.MoE.forward` (no EP, model forward)
and `ep.ExpertParallel.forward` (the engine, EP size 1).
"""

import pytest
import torch

pytest.importorskip("triton")

from agents.runtime import moe_ops  # noqa: E402
from agents.runtime.config import EngineConfig, ModelConfig  # noqa: E402
from agents.runtime.kernels import load  # noqa: E402
from agents.runtime.model import Transformer  # noqa: E402

TWINS = {
    "grouped_topk": "routing",
    "histogram": "histogram",
    "permute": "permute",
    "unpermute": "unpermute",
    "grouped_swiglu": "grouped_gemm",
    "combine": "combine",
}
TORCH_OPS = {name: getattr(moe_ops, name) for name in TWINS}  # captured at import, before any patching
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
    topk=2,
    topk_group=2,
    max_seq_len=64,
)


@pytest.fixture
def kernels_on(monkeypatch):
    calls = {name: 0 for name in TWINS}

    def patch(name):
        impl = load(TWINS[name]).triton_impl

        def counted(*args, **kwargs):
            calls[name] += 1
            return impl(*args, **kwargs)

        monkeypatch.setattr(moe_ops, name, counted)

    for name in TWINS:
        patch(name)
    return calls


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
    with pytest.MonkeyPatch.context() as mp:
        for name in TWINS:  # the torch run: undo the fixture's patches inside this block
            mp.setattr(moe_ops, name, TORCH_OPS[name])
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
    with pytest.MonkeyPatch.context() as mp:
        for name in TWINS:
            mp.setattr(moe_ops, name, TORCH_OPS[name])
        want, want_logits = generate(make_model())
    got, got_logits = generate(make_model())
    assert kernels_on["grouped_swiglu"] > 0 and kernels_on["permute"] > 0
    assert got == want and all(len(t) == 6 for t in got)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=1e-4)
