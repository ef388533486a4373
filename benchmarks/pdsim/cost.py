"""The one step-cost and latency model of the PD simulator: every time the simulator spends comes from here.

Shapes follow a small MoE model served disaggregated: a prefill replica (1 GPU) runs chunked prefill,
its step time affine in the tokens it batches, so it is faster per token when it batches more; a
decode replica (2 GPUs) runs one token for every sequence in its batch per step, its step time
affine in the batch size and the KV tokens it reads, plus any short prompts it prefills locally
(PD-aware routing), which every sequence in its batch waits for. KV moves from prefill to decode at
a fixed cost plus a per-token cost. A new replica needs `startup_seconds` before it is ready, then
runs `warmup_factor` times slower for `warmup_seconds` (cold caches and kernels): the windows a
planner must not learn capacity from. Numbers only need to move the right way with load.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineCost:
    # prefill replica
    prefill_gpus: int = 1
    prefill_step_base: float = 0.010  # seconds per step
    prefill_step_per_token: float = 110e-6  # seconds per prompt token in the step
    prefill_max_batch_tokens: int = 4096  # chunked-prefill budget per step
    # decode replica
    decode_gpus: int = 2
    decode_step_base: float = 0.012
    decode_step_per_seq: float = 0.0006  # seconds per sequence in the batch
    decode_step_per_kv_token: float = 1e-7  # seconds per KV token read
    decode_step_per_prefill_token: float = 60e-6  # local prefill on the decode replica
    decode_max_prefill_tokens: int = 512  # local-prefill chunk per decode step
    decode_kv_capacity_tokens: int = 160_000
    decode_max_batch: int = 96
    # KV hand-off, prefill -> decode
    handoff_base: float = 0.004
    handoff_per_token: float = 1e-6
    # lifecycle
    startup_seconds: float = 120.0
    warmup_seconds: float = 60.0
    warmup_factor: float = 2.0

    def prefill_step(self, num_tokens: float, warm: bool = True) -> float:
        seconds = self.prefill_step_base + self.prefill_step_per_token * num_tokens
        return seconds if warm else seconds * self.warmup_factor

    def decode_step(self, batch: int, kv_tokens: float, prefill_tokens: float = 0.0, warm: bool = True) -> float:
        seconds = (self.decode_step_base + self.decode_step_per_seq * batch
                   + self.decode_step_per_kv_token * kv_tokens + self.decode_step_per_prefill_token * prefill_tokens)
        return seconds if warm else seconds * self.warmup_factor

    def decode_steps(self, batch: int, kv_tokens: float, num_steps: int, prefill_tokens: float = 0.0,
                     warm: bool = True) -> float:
        """Seconds of `num_steps` decode steps of one batch: its KV grows by `batch` tokens a step."""
        growth = self.decode_step_per_kv_token * batch * num_steps * (num_steps - 1) / 2
        seconds = num_steps * self.decode_step(batch, kv_tokens, prefill_tokens) + growth
        return seconds if warm else seconds * self.warmup_factor

    def handoff(self, num_tokens: float) -> float:
        return self.handoff_base + self.handoff_per_token * num_tokens

    def gpus(self, role: str) -> int:
        return self.prefill_gpus if role == "prefill" else self.decode_gpus
