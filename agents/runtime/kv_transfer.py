"""KV hand-off between instances: a prefill instance computes a prompt's KV and first token, a decode
instance continues from them as if it had prefilled the prompt itself.

Attention is data parallel, so one rank holds a sequence's whole KV (every attention layer, the MTP
layer's included): the hand-off is rank to rank, whatever the two instances' EP sizes. The payload
is the committed positions only (prompt tokens); the first token is recomputed as the decode side's
first query, exactly as a unified engine's next step would. Values travel in the cache's dtype,
untouched, so the decode side produces the same tokens a unified instance does.
"""

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from agents.runtime.sequence import SamplingParams, Sequence, SequenceStatus


@dataclass(slots=True)
class KVHandoff:
    request_id: str
    token_ids: list[int]  # prompt + first token
    num_prompt_tokens: int
    params: SamplingParams
    kv: Tensor  # [num_attn_layers, 2, num_prompt_tokens, H, Dh] on the host

    def to_bytes(self) -> bytes:
        kv = self.kv.contiguous().numpy()
        header = {
            "request_id": self.request_id,
            "token_ids": self.token_ids,
            "num_prompt_tokens": self.num_prompt_tokens,
            "dtype": str(kv.dtype),
            "shape": list(kv.shape),
            "params": {
                "temperature": self.params.temperature,
                "max_tokens": self.params.max_tokens,
                "stop_token_ids": list(self.params.stop_token_ids),
            },
        }
        return json.dumps(header).encode() + b"\n" + kv.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "KVHandoff":
        end = data.index(b"\n")
        header = json.loads(data[:end])
        shape, dtype = tuple(header["shape"]), np.dtype(header["dtype"])
        if len(data) - end - 1 != math.prod(shape) * dtype.itemsize:
            raise ValueError("KV payload size does not match its header")
        kv = torch.from_numpy(np.frombuffer(data[end + 1 :], dtype=dtype).reshape(shape).copy())
        params = header["params"]
        return cls(
            header["request_id"],
            header["token_ids"],
            header["num_prompt_tokens"],
            SamplingParams(params["temperature"], params["max_tokens"], tuple(params["stop_token_ids"])),
            kv,
        )


def _slots(seq: Sequence, positions: range, block_size: int) -> Tensor:
    return torch.tensor(
        [seq.block_table[p // block_size] * block_size + p % block_size for p in positions], dtype=torch.int64
    )


def export_kv(engine, request_id: str) -> KVHandoff:
    """Call right after the step that produced the request's first token; the request leaves this engine."""
    seq = engine.seqs[request_id]
    if seq.num_output_tokens != 1 or seq.num_computed_tokens != seq.num_prompt_tokens:
        raise ValueError(f"request {request_id} is not between its prefill and its first decode step")
    slots = _slots(seq, range(seq.num_prompt_tokens), engine.cfg.block_size).to(engine.cfg.device)
    kv = engine.runner.kv_cache[:, :, slots].cpu().clone()
    handoff = KVHandoff(request_id, list(seq.token_ids), seq.num_prompt_tokens, seq.params, kv)
    del engine.seqs[request_id]
    seq.finish_reason = "handoff"
    engine.scheduler.finish(seq)  # frees the blocks; full prompt blocks stay in the prefix cache
    return handoff


def import_kv(engine, handoff: KVHandoff) -> bool:
    """Adds the request as running, its prompt KV in place. False: no KV room now, try again later."""
    num_prompt = handoff.num_prompt_tokens
    if handoff.request_id in engine.seqs:
        raise ValueError(f"duplicate request id {handoff.request_id}")
    if len(handoff.token_ids) != num_prompt + 1 or handoff.kv.shape[2] != num_prompt:
        raise ValueError("a hand-off carries the prompt's KV and exactly one generated token")
    expected = engine.runner.kv_cache.shape[:2] + (num_prompt,) + engine.runner.kv_cache.shape[3:]
    if tuple(handoff.kv.shape) != tuple(expected):
        raise ValueError(f"KV of shape {tuple(handoff.kv.shape)} does not fit this engine's cache {expected}")
    reserved = engine.scheduler.num_reserved_tokens
    if num_prompt + handoff.params.max_tokens + reserved > engine.model.cfg.max_seq_len:
        raise ValueError(f"prompt + max_tokens exceeds max_seq_len {engine.model.cfg.max_seq_len}")
    now = time.monotonic()
    seq = Sequence(handoff.request_id, handoff.token_ids[:num_prompt], handoff.params, now)
    seq.token_ids.append(handoff.token_ids[-1])  # not append(): the prefill side already judged the finish
    bm = engine.block_manager
    if len(engine.scheduler.running) >= engine.scheduler.max_num_seqs or not bm.can_allocate(seq, reserved):
        return False
    num_query, num_hit = bm.num_query_tokens, bm.num_hit_tokens
    bm.allocate(seq, reserved)
    bm.num_query_tokens, bm.num_hit_tokens = num_query, num_hit  # a hand-off is not a prompt admission
    start = seq.num_computed_tokens  # blocks this engine already caches need no copy
    slots = _slots(seq, range(start, num_prompt), engine.cfg.block_size).to(engine.cfg.device)
    engine.runner.kv_cache[:, :, slots] = handoff.kv[:, :, start:].to(engine.runner.kv_cache)
    seq.num_computed_tokens = num_prompt
    seq.status = SequenceStatus.RUNNING
    seq.first_scheduled_time = seq.first_token_time = now
    bm.cache_full_blocks(seq)
    engine.scheduler.running.append(seq)
    engine.seqs[seq.request_id] = seq
    return True
