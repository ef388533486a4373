"""Triton MoE kernels vs their torch twins and the strongest installable baseline, on a CUDA device.

Usage: python benchmarks/kernels.py [--out benchmarks/results/kernels-<date>.md] [--tokens 1,16,...] [--ep 8,32]
       [--sweep]   also time a few GEMM block configs per row and print the best (to update pick_config)

DeepSeek-V3 expert shapes: hidden 7168, intermediate 2048, 256 routed experts over EP 8 / 32 (32 / 8 local
experts), top-8, bf16 weights and activations. For T tokens per rank, each of the EP ranks routes its T tokens
(biased group-limited top-8 of a random gate); rank 0's expert work is the assignments on its local experts,
about 8T rows, one (token, expert) pair per row after dispatch. Compared on those rows:
  triton   grouped_gemm.swiglu_experts: block-aligned sort + gate/up GEMM (SwiGLU fused) + down GEMM x weight
  torch    the moe_ops chain (permute, per-expert grouped_swiglu, unpermute, weight): the runtime's torch path
  baseline vLLM fused_experts if vllm imports, else torch._grouped_mm on pre-sorted rows, else none
Targets (issue 7): >= 5x the torch path and >= 1.0x the baseline. Timing: triton.testing.do_bench, median.
A second table times the other kernels against their torch twins at the largest token count.
Needs CUDA and a compiled (not interpreted) Triton: it exits with a message on a CPU-only machine.
"""

import argparse
import datetime
import functools
import os
import sys

import torch

HIDDEN, INTER, NUM_EXPERTS, TOPK, NUM_GROUPS, TOPK_GROUP, ROUTE_SCALE = 7168, 2048, 256, 8, 8, 4, 2.5
DEVICE, DTYPE = "cuda", torch.bfloat16
SWEEP_CONFIGS = [
    dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
    dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=3),
]


def require_gpu() -> None:
    if not torch.cuda.is_available():
        sys.exit(
            "benchmarks/kernels.py measures the Triton kernels on a CUDA GPU and none is available here. "
            "On CPU the kernels are checked, not timed: OMP_NUM_THREADS=1 pytest tests/agents/runtime/kernels"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("unset TRITON_INTERPRET: the benchmark times compiled kernels, not the interpreter")
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.exit("triton is not installed: pip install 'moectl[kernels]'")


def bench(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")  # ms


def local_rows(num_tokens: int, ep: int, gen: torch.Generator, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot id [R, 1] and routing weight [R, 1] of every assignment on rank 0's experts, from all ranks."""
    from agents.runtime.kernels import refs

    scores = torch.sigmoid(torch.randn(ep * num_tokens, NUM_EXPERTS, generator=gen, device=dev))
    bias = 0.01 * torch.randn(NUM_EXPERTS, generator=gen, device=dev)
    weights, ids = refs.grouped_topk(scores, bias, NUM_GROUPS, TOPK_GROUP, TOPK, ROUTE_SCALE)
    local = ids < NUM_EXPERTS // ep  # rank 0 owns experts 0 .. E/ep - 1
    return ids[local][:, None], weights[local][:, None]


def torch_reference(x, weights, ids, w13, w2):
    from agents.runtime import moe_ops

    order, counts = moe_ops.permute(ids, w13.shape[0])
    y = moe_ops.grouped_swiglu(x[order], counts, w13, w2)
    return moe_ops.unpermute(y, order, ids.numel()) * weights


def make_baseline():
    """(name, fn(x, weights, ids, w13, w2) -> [R, D]) for the strongest baseline that runs here."""
    try:
        from vllm.model_executor.layers.fused_moe import fused_experts

        def vllm_fn(x, weights, ids, w13, w2):
            return fused_experts(x, w13, w2, weights.float(), ids.int(), inplace=False)

        return "vLLM fused_experts", vllm_fn
    except Exception:  # noqa: BLE001 - any import failure means vLLM is not usable here
        pass
    if hasattr(torch, "_grouped_mm"):

        def grouped_mm_fn(x, weights, ids, w13, w2):
            order = ids[:, 0].argsort(stable=True)
            counts = torch.bincount(ids[:, 0], minlength=w13.shape[0])
            offs = counts.cumsum(0).int()
            h = torch._grouped_mm(x[order], w13.transpose(1, 2), offs=offs)  # [R, 2I]
            gate, up = h.chunk(2, dim=-1)
            y = torch._grouped_mm(torch.nn.functional.silu(gate) * up, w2.transpose(1, 2), offs=offs)
            out = torch.empty_like(y)
            out[order] = y
            return out * weights

        return "torch._grouped_mm", grouped_mm_fn
    return "none", None


def expert_row(ep, num_tokens, w13, w2, gen, base_fn, sweep) -> str:
    from agents.runtime.kernels.grouped_gemm import pick_config, swiglu_experts

    ids, weights = local_rows(num_tokens, ep, gen, w13.device)
    rows = ids.shape[0]
    x = torch.randn(rows, HIDDEN, generator=gen, device=w13.device).to(w13.dtype)
    weights = weights.to(w13.dtype)
    got = swiglu_experts(x, ids, w13, w2, weights)
    want = torch_reference(x.float(), weights.float(), ids, w13.float(), w2.float())
    err = ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-9)).item()
    del want
    ms = bench(functools.partial(swiglu_experts, x, ids, w13, w2, weights))
    ref_ms = bench(functools.partial(torch_reference, x, weights, ids, w13, w2))
    base_ms = float("nan")
    if base_fn is not None:
        try:
            base_ms = bench(functools.partial(base_fn, x, weights, ids, w13, w2))
        except Exception as e:  # noqa: BLE001 - report, keep measuring the rest
            print(f"baseline failed at EP {ep}, T {num_tokens}: {e}", file=sys.stderr)
    if sweep:
        timed = [(bench(functools.partial(swiglu_experts, x, ids, w13, w2, weights, c)), c) for c in SWEEP_CONFIGS]
        best_ms, best = min(timed, key=lambda p: p[0])
        picked = pick_config(rows, w13.shape[0], INTER, HIDDEN)
        print(f"  sweep EP {ep} T {num_tokens}: picked {picked} {ms:.3f} ms; best {best} {best_ms:.3f} ms")
    tflops = 2 * rows * 3 * HIDDEN * INTER / ms / 1e9
    return (
        f"| {ep} | {w13.shape[0]} | {num_tokens} | {rows} | {ms:.3f} | {ref_ms:.3f} | {base_ms:.3f} "
        f"| {ref_ms / ms:.1f}x | {base_ms / ms:.2f}x | {tflops:.0f} | {err:.1e} |"
    )


def expert_table(tokens: list[int], eps: list[int], sweep: bool) -> list[str]:
    dev, dt = DEVICE, DTYPE
    gen = torch.Generator(device=dev).manual_seed(0)
    base_name, base_fn = make_baseline()
    lines = [
        f"| EP | local experts | tokens/rank | rows | triton ms | torch ms | {base_name} ms | vs torch | vs baseline "
        "| TFLOP/s | max rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ep in eps:
        num_local = NUM_EXPERTS // ep
        w13 = (torch.randn(num_local, 2 * INTER, HIDDEN, generator=gen, device=dev) / HIDDEN**0.5).to(dt)
        w2 = (torch.randn(num_local, HIDDEN, INTER, generator=gen, device=dev) / INTER**0.5).to(dt)
        for t in tokens:
            lines.append(expert_row(ep, t, w13, w2, gen, base_fn, sweep))
            print(lines[-1], flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()
    return lines


def ops_table(num_tokens: int) -> list[str]:
    from agents.runtime.kernels import load

    dev = DEVICE
    cases = [
        (
            "routing",
            dict(
                num_tokens=num_tokens,
                num_experts=NUM_EXPERTS,
                num_groups=NUM_GROUPS,
                topk_group=TOPK_GROUP,
                top_k=TOPK,
                return_recall=True,
            ),
        ),
        ("histogram", dict(num_tokens=num_tokens, top_k=TOPK, num_bins=NUM_EXPERTS)),
        ("permute", dict(num_tokens=num_tokens, top_k=TOPK, num_slots=NUM_EXPERTS)),
        (
            "unpermute",
            dict(num_assignments=num_tokens * TOPK, num_rows=num_tokens * TOPK, dim=HIDDEN, dtype=DTYPE),
        ),
        ("combine", dict(num_tokens=num_tokens, top_k=TOPK, dim=HIDDEN, dtype=DTYPE)),
        ("quant", dict(num_rows=num_tokens, dim=HIDDEN, group_size=128, dtype=DTYPE)),
    ]
    lines = [f"| kernel (T={num_tokens}) | triton ms | torch ms | speed-up | matches |", "|---|---|---|---|---|"]
    for name, shape in cases:
        mod = load(name)
        args = mod.make_inputs(0, device=dev, **shape)
        got, want = mod.triton_impl(*args), mod.reference(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        ok = all(
            torch.allclose(g.float(), w.float(), atol=2e-2, rtol=2e-2)
            if w.is_floating_point()
            else (g.int() - w.int()).abs().max().item() <= (1 if w.dtype == torch.int8 else 0)
            for g, w in zip(got, want, strict=True)
        )
        ms, ref_ms = bench(functools.partial(mod.triton_impl, *args)), bench(functools.partial(mod.reference, *args))
        lines.append(f"| {name} | {ms:.3f} | {ref_ms:.3f} | {ref_ms / ms:.1f}x | {ok} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1,16,64,256,1024,4096")
    ap.add_argument("--ep", default="8,32")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    require_gpu()
    import triton

    tokens = [int(t) for t in args.tokens.split(",")]
    eps = [int(e) for e in args.ep.split(",")]
    device = torch.cuda.get_device_name()
    head = [
        f"# Triton MoE kernels on {device} ({datetime.date.today().isoformat()})",
        "",
        f"torch {torch.__version__}, triton {triton.__version__}; bf16; hidden {HIDDEN}, inter {INTER}, "
        f"{NUM_EXPERTS} experts, top-{TOPK}; rows = assignments on rank 0's experts; median of do_bench.",
        "",
    ]
    body = expert_table(tokens, eps, args.sweep) + [""] + ops_table(max(tokens))
    text = "\n".join(head + body) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
