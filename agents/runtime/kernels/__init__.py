"""Triton twins of the MoE hot ops in `agents.runtime.moe_ops`, plus int8 dispatch quantisation.

This package is the only place in the repo that imports triton, and it does so lazily: importing
`agents.runtime.kernels` (and `refs`) needs only torch. The kernel modules (`routing`, `histogram`, `align`,
`permute`, `unpermute`, `grouped_gemm`, `combine`, `fused_moe`, `quant`, `reach`, `replica_split`) import triton at
the top and are loaded only when the Triton backend is picked.

Backend choice (`moe_backend`): Triton on CUDA when triton imports, torch otherwise; `MOECTL_KERNELS=triton|torch`
forces either. Forcing Triton on a CPU device runs Triton's interpreter, which needs `TRITON_INTERPRET=1` in the
environment before triton is imported (triton reads it when `@triton.jit` runs).
"""

import functools
import importlib
import os
import sys
from types import SimpleNamespace

import torch

ENV_VAR = "MOECTL_KERNELS"
BACKENDS = ("triton", "torch")
KERNEL_MODULES = (
    "routing",
    "histogram",
    "align",
    "permute",
    "unpermute",
    "grouped_gemm",
    "combine",
    "fused_moe",
    "quant",
    "reach",
    "replica_split",
)


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def moe_backend(device) -> str:
    """'triton' or 'torch' for tensors on `device`."""
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced not in ("", "auto", *BACKENDS):
        raise ValueError(f"{ENV_VAR}={forced!r}: expected one of triton, torch, auto")
    if forced == "torch":
        return "torch"
    dev = torch.device(device)
    if forced == "triton":
        if not triton_available():
            raise RuntimeError(f"{ENV_VAR}=triton but triton is not installed: pip install 'moectl[kernels]'")
        if dev.type != "cuda":
            _check_interpreter(dev)
        return "triton"
    return "triton" if dev.type == "cuda" and triton_available() else "torch"


def _check_interpreter(dev: torch.device) -> None:
    # triton decides interpreter-or-compiler when a kernel is decorated, so the env var must predate the import
    if not interpreting():
        raise RuntimeError(
            f"{ENV_VAR}=triton on a {dev.type} device runs Triton's interpreter: set TRITON_INTERPRET=1 in the "
            "environment before triton or agents.runtime.kernels.* kernel modules are imported"
        )
    common = sys.modules.get(f"{__name__}._common")
    if common is not None and not common.INTERPRET:
        raise RuntimeError(
            "the kernel modules were imported before TRITON_INTERPRET=1 was set; set it at process start"
        )


def load(name: str):
    """Import one kernel module (imports triton)."""
    if name not in KERNEL_MODULES:
        raise ValueError(f"unknown kernel module {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


@functools.cache
def _ops(backend: str) -> SimpleNamespace:
    from agents.runtime import moe_ops, replica_split
    from agents.runtime.kernels import refs

    if backend == "torch":
        return SimpleNamespace(
            backend="torch",
            grouped_topk=refs.grouped_topk,
            routing_recall=moe_ops.routing_recall,
            histogram=moe_ops.histogram,
            reach=moe_ops.reach,
            permute=moe_ops.permute,
            unpermute=moe_ops.unpermute,
            grouped_swiglu=moe_ops.grouped_swiglu,
            combine=moe_ops.combine,
            fused_moe=refs.fused_moe,
            quantize=refs.quantize,
            dequantize=refs.dequantize,
            balance_split=replica_split.balance_split,
        )
    quant = load("quant")
    return SimpleNamespace(
        backend="triton",
        grouped_topk=load("routing").triton_impl,
        routing_recall=moe_ops.routing_recall,  # fused into grouped_topk(..., return_recall=True) on this path
        histogram=load("histogram").triton_impl,
        reach=load("reach").triton_impl,
        permute=load("permute").triton_impl,
        unpermute=load("unpermute").triton_impl,
        grouped_swiglu=load("grouped_gemm").triton_impl,
        combine=load("combine").triton_impl,
        fused_moe=load("fused_moe").triton_impl,
        quantize=quant.triton_impl,
        dequantize=quant.dequantize_triton,
        balance_split=load("replica_split").triton_impl,
    )


def torch_ops() -> SimpleNamespace:
    """The torch ops whatever the device: for autograd (the Triton kernels have no backward)."""
    return _ops("torch")


def get_ops(device) -> SimpleNamespace:
    """The MoE ops for `device`; each has the signature of its `moe_ops` / `refs` twin."""
    return _ops(moe_backend(device))


def ops_for(x: torch.Tensor) -> SimpleNamespace:
    """What the runtime's MoE layers call: torch while autograd records (training; the kernels have no
    backward), else the backend for x's device."""
    return torch_ops() if torch.is_grad_enabled() and x.requires_grad else get_ops(x.device)
