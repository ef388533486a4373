"""SGLang's own code, run for a test in the venv tests/support/engines/build.py made (skipped, saying how to
build it, when it is missing; under CI=true missing is a failure, as `make test` builds it)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from support.engines.build import BUILT, SGLANG_VERSION, sglang_python

DRIVER = Path(__file__).with_name("sglang_driver.py")
REPO = Path(__file__).resolve().parents[3]


def require_sglang() -> Path:
    python = sglang_python()
    if python.exists() and (python.parent.parent / BUILT).exists():
        return python
    message = (f"SGLang {SGLANG_VERSION}'s venv is missing at {python.parent.parent}: run "
               f"`.venv/bin/python tests/support/engines/build.py` (make test does)")
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def run_sglang(*args: str, timeout: float = 300) -> dict:
    """The driver's JSON answer; fails the test with SGLang's own stderr when it raised."""
    python = require_sglang()
    done = subprocess.run([str(python), str(DRIVER), *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ | {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
                                            # this checkout's moectl (the live plugin), not the venv's install
                                            "PYTHONPATH": str(REPO),
                                            # our torch and NumPy: this run's venv, after SGLang's own packages
                                            "MOECTL_PROJECT_SITE": sysconfig.get_path("purelib")})
    if done.returncode != 0:
        pytest.fail(f"SGLang's code refused it:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
