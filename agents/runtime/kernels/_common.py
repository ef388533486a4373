"""Shared helpers for the kernel modules (imports triton)."""

import os

import torch
import triton

# triton.jit picks interpreter or compiler when a kernel is decorated; record what the kernels were built with
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def check_dtype(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if INTERPRET and t.dtype == torch.bfloat16:
            # upstream triton#11584: interpreter bf16 dot and elementwise math are wrong, bf16 atomics raise
            raise NotImplementedError("Triton's interpreter cannot run bf16 kernels; use fp16/fp32 or the torch path")
