"""A test-only `vllm.general_plugins` entry (named by support/engines/vllm_server.py, never by pyproject.toml):
makes moectl's expert counter drop or double one whole step on demand, to show the count-equality check catches
either. The file named by $MOECTL_TEST_COUNT_FAULT_FILE says `drop` or `double`; the next step of every MoE layer
is then dropped (or counted twice) and the file reset to `off`."""

from __future__ import annotations

import os
from pathlib import Path


def register() -> None:
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

    from agents.adapters.vllm.policy import register as register_moectl

    register_moectl()  # idempotent: the counter is installed once, whichever plugin loads first
    counter = getattr(BaseRouter, "_moectl_counter", None)
    if counter is None:
        return
    flag = Path(os.environ["MOECTL_TEST_COUNT_FAULT_FILE"])
    add, done = counter.add, set()

    def faulty_add(layer, num_experts, topk_ids) -> None:  # noqa: ANN001
        mode = flag.read_text().strip() if flag.exists() else "off"
        if mode == "off" or layer in done:
            add(layer, num_experts, topk_ids)
            return
        if mode == "double":
            add(layer, num_experts, topk_ids)
            add(layer, num_experts, topk_ids)
        done.add(layer)
        if done >= set(counter.counts):
            flag.write_text("off")
            done.clear()

    counter.add = faulty_add
