"""Per-expert load counted inside vLLM's workers, every step, EPLB or not. Installed by the general plugin.

vLLM's routers (`fused_moe/router/base_router.py`, `BaseRouter._select_experts`) compute each token's top-k logical
expert ids, then `_apply_eplb_mapping(topk_ids)` maps them to physical slots (an identity without EPLB). We wrap
that method at class level: its argument is exactly the logical ids, [num_tokens, top_k], of every modular MoE
layer's step, before any EPLB mapping. `MoERunner.__init__` (fused_moe/runner/moe_runner.py) is wrapped to tag its
router with the runner's hidden-layer index, so the counts are kept per MoE layer.

Counting stays on the router's device: one `index_add_` of ones into a persistent int64 row per layer, no host
sync and no allocation but the ones' (a [num_tokens * top_k] fill). A reader thread (window_handoff.py) snapshots
the rows at a low rate. Any failure in the hook is logged once and counted; vLLM's ids pass through untouched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("moectl.adapter.vllm")


class ExpertCounter:
    """counts: hidden layer index -> [num_experts] int64 tokens on the router's device (cumulative since start)."""

    def __init__(self, on_first: Callable[[ExpertCounter], None] = lambda counter: None):
        self.counts: dict[int, object] = {}
        self.first_layer, self.last_layer = None, None  # of the MoE layers tagged (a step runs first to last)
        self.num_steps_begun = self.num_steps_done = 0  # a seqlock: the reader copies between steps (snapshot)
        self.ones = None
        self.num_failures = 0
        self.on_first = on_first
        self.lock = threading.Lock()  # guards creating rows (the reader copies under it)

    def register_layer(self, layer: int) -> None:
        """A MoE layer the model built (hidden-layer index)."""
        self.first_layer = layer if self.first_layer is None else min(self.first_layer, layer)
        self.last_layer = layer if self.last_layer is None else max(self.last_layer, layer)

    def add(self, layer: int, num_experts: int, topk_ids) -> None:  # noqa: ANN001 (torch.Tensor)
        """topk_ids: [num_tokens, top_k] logical expert ids of one layer's step."""
        import torch

        if layer == self.first_layer:
            self.num_steps_begun += 1

        row = self.counts.get(layer)
        if row is None:
            with self.lock:
                row = self.counts[layer] = torch.zeros(num_experts, dtype=torch.int64, device=topk_ids.device)
                if len(self.counts) == 1:
                    self.on_first(self)
        flat = topk_ids.reshape(-1)
        if self.ones is None or self.ones.numel() < flat.numel() or self.ones.device != flat.device:
            self.ones = torch.ones(max(flat.numel(), 8192), dtype=torch.int64, device=flat.device)
        row.index_add_(0, flat.long(), self.ones[:flat.numel()])
        if layer == self.last_layer:
            self.num_steps_done = self.num_steps_begun

    def snapshot(self, max_tries: int = 2000) -> dict[int, list[int]]:
        """Hidden layer index -> counts, copied to the host (the one sync, on the reader's thread), between two
        steps: a copy taken while a step is between its first and last MoE layer would split that step across
        windows by layer. Retries while steps run; after `max_tries` (a busy engine), the last copy. On the CPU
        a step's adds are done when its host counters move; a GPU's are queued (docs/reference/engines.md)."""
        import time

        for _ in range(max_tries):
            begun = self.num_steps_begun
            if begun == self.num_steps_done:
                with self.lock:
                    rows = dict(self.counts)
                copy = {layer: row.tolist() for layer, row in sorted(rows.items())}
                if self.num_steps_begun == begun:
                    return copy
            time.sleep(0.0005)
        with self.lock:
            rows = dict(self.counts)
        return {layer: row.tolist() for layer, row in sorted(rows.items())}

    def guarded(self, layer: int | None, num_experts: int, topk_ids) -> None:  # noqa: ANN001
        if layer is None:
            return
        try:
            self.add(layer, num_experts, topk_ids)
        except Exception:  # noqa: BLE001 (the engine's step must go on whatever counting does)
            self.num_failures += 1
            if self.num_failures == 1:
                log.exception("expert counting failed; vLLM's step goes on, further failures are counted only")


def install(counter: ExpertCounter) -> bool:
    """Wraps vLLM's router and MoE runner classes in this process (once). False, logged, where vLLM's code has
    not the names this relies on (then nothing is counted and vLLM runs as it would)."""
    try:
        from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
        from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
    except ImportError as exc:
        log.error("expert counting not installed: %s", exc)
        return False
    if getattr(BaseRouter, "_moectl_counter", None) is not None:
        return True
    if not hasattr(BaseRouter, "_apply_eplb_mapping") or not hasattr(MoERunner, "layer_id"):
        log.error("expert counting not installed: this vLLM's BaseRouter/MoERunner lack the names it wraps")
        return False
    apply_mapping, runner_init = BaseRouter._apply_eplb_mapping, MoERunner.__init__

    def counted_mapping(self, topk_ids):  # noqa: ANN001, ANN202 (vLLM's signature)
        counter.guarded(getattr(self, "_moectl_layer", None), self.global_num_experts, topk_ids)
        return apply_mapping(self, topk_ids)

    def tagging_init(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        runner_init(self, *args, **kwargs)
        try:
            self.router._moectl_layer = int(self.layer_id)
            counter.register_layer(self.router._moectl_layer)
        except Exception:  # noqa: BLE001 (a runner we cannot place is not counted, never broken)
            log.warning("MoE runner %s not counted: no layer index", getattr(self, "layer_name", "?"))

    BaseRouter._apply_eplb_mapping = counted_mapping
    MoERunner.__init__ = tagging_init
    BaseRouter._moectl_counter = counter
    return True
