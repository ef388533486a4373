"""SGLang's HTTP surface for the closed-loop tests, answered from what SGLang's own code produced here.

The server itself cannot run on this machine (its kernels need a GPU), so this stands in for its HTTP layer
only: /server_info is SGLang's resolved ServerArgs (its code, through sglang_driver.py) with a start time, and
each dump request moves the next dump that SGLang's recorder wrote (its code, same driver) into the shared
directory under the name rank 0 gives it. The metrics page carries the names the pinned source defines."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from agents.processes import free_port
from support.engines.sglang_run import run_sglang


def skewed_dumps(directory: Path, *, num_windows: int, num_passes: int = 2, num_tokens: int = 32,
                 seed: int = 0) -> tuple[list[Path], dict]:
    """Dumps by SGLang's recorder of a DeepSeek-V3 group (61 layers, 256 experts + 32 redundant over EP8, the
    trivial layout) routing Zipf-skewed top-8s whose hot experts sit on the first GPUs. Returns the dump files in
    order and the server info of that layout."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, 257) ** 1.1
    weights /= weights.sum()
    # per MoE layer its own hot experts, among the first 72 (the first two GPUs), the same in every window: hot
    # experts stay hot (DESIGN.md)
    orders = [np.r_[rng.permutation(72), 72 + rng.permutation(184)] for _ in range(58)]
    windows = []
    for _ in range(num_windows):
        passes = []
        for _ in range(num_passes):
            topk = [[] for _ in range(3)]
            topk += [order[rng.choice(256, size=(num_tokens, 8), p=weights)].tolist() for order in orders]
            passes.append(topk)
        windows.append(passes)
    p2l = np.tile(np.arange(288) % 256, (61, 1))
    spec = directory / "passes.json"
    spec.write_text(json.dumps({"num_layers": 61, "num_experts": 256, "ep_size": 8, "redundant": 32,
                                "port": free_port(), "physical_to_logical_map": p2l.tolist(), "windows": windows}))
    out = directory / "recorded"
    files = run_sglang("dump", str(out), "--passes", str(spec))["files"]
    info = run_sglang("server-info", "--ep-size", "8", "--redundant", "32")
    return [out / name for name in files], info


class RecordedSGLang:
    """The sidecar's SGLangServer, answered from SGLang's own outputs (module doc)."""

    def __init__(self, info: dict, dumps: list[Path], dump_dir: Path, metrics: str):
        self.info = info | {"startup_time": time.time() - 60}
        self.dumps, self.dump_dir, self.page = list(dumps), Path(dump_dir), metrics
        self.num_started = 0

    def server_info(self) -> dict:
        return self.info

    def start_record(self) -> None:
        self.num_started += 1

    def dump_record(self) -> None:
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        source = self.dumps.pop(0) if self.dumps else None
        if source is not None:
            shutil.copy(source, self.dump_dir / f"expert_distribution_recorder_{time.time()}.pt")

    def metrics(self) -> str:
        return self.page

    def close(self) -> None:
        pass
