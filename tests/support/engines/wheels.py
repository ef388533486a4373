"""The engines' released wheels (downloaded by tests/support/engines/build.py), read as the zips they are: the
source-contract tests read what the pinned release says, and vLLM's EPLB policy (pure NumPy and torch) is loaded
from it and run, without importing vLLM's package (which needs its CUDA extension)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
import zipfile

import pytest

from support.engines.build import SGLANG_VERSION, VLLM_VERSION, wheel


def source(name: str, path: str) -> str:
    """The text of `path` inside the pinned wheel of engine `name` (sglang or vllm)."""
    version = {"sglang": SGLANG_VERSION, "vllm": VLLM_VERSION}[name]
    found = wheel(name, version)
    if found is None:
        message = f"{name} {version}'s wheel is not cached: run `.venv/bin/python tests/support/engines/build.py`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with zipfile.ZipFile(found) as archive:
        return archive.read(path).decode()


def vllm_policy_module() -> types.ModuleType:
    """vLLM's `policy/default.py` and `policy/abstract.py` from the pinned wheel, as a package of their own."""
    package = "pinned_vllm_eplb_policy"
    if f"{package}.default" in sys.modules:
        return sys.modules[f"{package}.default"]
    sys.modules[package] = types.ModuleType(package)
    sys.modules[package].__path__ = []
    for name in ("abstract", "default"):
        text = source("vllm", f"vllm/distributed/eplb/policy/{name}.py")
        spec = importlib.util.spec_from_loader(f"{package}.{name}", loader=None)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = package
        sys.modules[spec.name] = module
        exec(compile(text, f"vllm/distributed/eplb/policy/{name}.py", "exec"), module.__dict__)  # noqa: S102
    return sys.modules[f"{package}.default"]
