"""Kernel tests run Triton's interpreter on CPU tensors.

TRITON_INTERPRET must be set before any kernel module runs `@triton.jit`, so it is set here at import time.
The interpreter does its math in numpy: one BLAS thread keeps it from fighting torch for the cores.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
