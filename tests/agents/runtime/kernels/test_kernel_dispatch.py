"""Backend choice: Triton on CUDA when triton imports, torch otherwise, MOECTL_KERNELS forces either."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.runtime import moe_ops
from agents.runtime.kernels import ENV_VAR, get_ops, moe_backend, refs, torch_ops, triton_available

ROOT = Path(__file__).resolve().parents[4]  # the repo root: tests/agents/runtime/kernels/ is four down


def run_py(code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", ENV_VAR)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def test_import_and_torch_ops_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import agents.runtime.kernels as k\n"
        "assert not k.triton_available()\n"
        "assert k.moe_backend('cuda') == 'torch' and k.moe_backend('cpu') == 'torch'\n"
        "assert k.get_ops('cpu').backend == 'torch'\n"
        "import os; os.environ['MOECTL_KERNELS'] = 'triton'\n"
        "try:\n    k.moe_backend('cpu')\nexcept RuntimeError as e:\n    print(e)\n"
    )
    out = run_py(code)
    assert out.returncode == 0, out.stderr
    assert "triton is not installed" in out.stdout


def test_default_and_forced_torch(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert moe_backend("cpu") == "torch"
    assert moe_backend("cuda") == ("triton" if triton_available() else "torch")  # no GPU needed to decide
    monkeypatch.setenv(ENV_VAR, "torch")
    assert moe_backend("cuda") == "torch"
    ops = get_ops("cuda")
    assert ops.backend == "torch" and ops.combine is moe_ops.combine and ops.quantize is refs.quantize
    assert torch_ops() is ops
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="expected one of"):
        moe_backend("cpu")


def test_forced_triton_on_cpu(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv(ENV_VAR, "triton")
    assert moe_backend("cpu") == "triton"  # conftest set TRITON_INTERPRET=1
    ops = get_ops("cpu")
    assert ops.backend == "triton" and ops.grouped_swiglu.__module__.endswith("kernels.grouped_gemm")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        moe_backend("cpu")


def test_forced_triton_after_compiled_import_is_refused():
    pytest.importorskip("triton")
    code = (
        "import os, agents.runtime.kernels as k\n"
        "k.load('histogram')\n"  # kernels decorated for the compiler: no interpreter
        "os.environ['TRITON_INTERPRET'] = '1'; os.environ['MOECTL_KERNELS'] = 'triton'\n"
        "try:\n    k.moe_backend('cpu')\nexcept RuntimeError as e:\n    print(e)\n"
    )
    out = run_py(code)
    assert out.returncode == 0, out.stderr
    assert "imported before TRITON_INTERPRET=1" in out.stdout
