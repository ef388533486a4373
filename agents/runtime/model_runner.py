import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agents.runtime.config import EngineConfig
from agents.runtime.kv_cache import allocate_kv_cache, build_attn_batch
from agents.runtime.model import Transformer
from agents.runtime.sequence import Sequence


@dataclass(slots=True)
class RunResult:
    new_token_ids: list[list[int]]  # per scheduled sequence, committed this step
    forward_seconds: float = 0.0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_by_position: list[int] = field(default_factory=list)


class ModelRunner:
    """Runs one step for the scheduled sequences: target forward, exact greedy verification, MTP drafts."""

    def __init__(self, model: Transformer, cfg: EngineConfig):
        self.model, self.cfg = model, cfg
        mc = model.cfg
        self.kv_cache = allocate_kv_cache(
            model.num_attn_layers, cfg.num_kv_blocks, cfg.block_size, mc.num_heads, mc.head_dim, cfg.device
        )
        self.generator = torch.Generator(device=cfg.device).manual_seed(cfg.seed)
        self.last_logits: Tensor | None = None  # [R, V] verified rows of the last step

    def batch(self, tables, starts, query_lens):
        return build_attn_batch(
            self.kv_cache, tables, starts, query_lens, self.cfg.block_size, self.cfg.device
        )

    @torch.inference_mode()
    def run(self, seqs: list[Sequence]) -> RunResult:
        k_max = self.cfg.num_speculative_tokens
        result = RunResult([], accepted_by_position=[0] * k_max)
        inputs = [seq.token_ids[seq.num_computed_tokens :] + seq.draft_token_ids for seq in seqs]
        starts = [seq.num_computed_tokens for seq in seqs]
        query_lens = [len(x) for x in inputs]
        batch, positions = self.batch([s.block_table for s in seqs], starts, query_lens)
        tokens = torch.tensor([t for x in inputs for t in x], dtype=torch.int64, device=self.cfg.device)
        t0 = time.perf_counter()
        h = self.model.trunk(tokens, positions, batch)  # [T, D]
        ends = torch.tensor(query_lens, device=self.cfg.device).cumsum(0).tolist()
        rows = [list(range(end - 1 - len(s.draft_token_ids), end)) for s, end in zip(seqs, ends, strict=True)]
        logits = self.model.logits(h[self.as_tensor([r for rs in rows for r in rs])])  # [R, V]
        self.last_logits = logits  # kept for inspection and tests
        targets = self.sample(logits, [s for s, rs in zip(seqs, rows, strict=True) for _ in rs])
        result.forward_seconds += time.perf_counter() - t0

        offset = 0
        for seq, rs in zip(seqs, rows, strict=True):
            drafts, target = seq.draft_token_ids, targets[offset : offset + len(rs)]
            offset += len(rs)
            num_accepted = 0
            while num_accepted < len(drafts) and drafts[num_accepted] == target[num_accepted]:
                num_accepted += 1
            if drafts:
                result.num_drafts += 1
                result.num_draft_tokens += len(drafts)
                result.num_accepted_tokens += num_accepted
                for pos in range(num_accepted):
                    result.accepted_by_position[pos] += 1
            new = []
            for token in target[: num_accepted + 1]:
                new.append(token)
                if seq.append(token):
                    break
            seq.num_computed_tokens = len(seq) - 1  # KV of rejected drafts is stale and will be overwritten
            seq.draft_token_ids = []
            result.new_token_ids.append(new)
        if k_max:
            t1 = time.perf_counter()
            self.draft(seqs, h, starts, ends, query_lens)
            result.forward_seconds += time.perf_counter() - t1
        return result

    def sample(self, logits: Tensor, seqs: list[Sequence]) -> list[int]:
        greedy = logits.argmax(-1)  # [R]
        temps = torch.tensor([s.params.temperature for s in seqs], device=logits.device)
        if not (temps > 0).any():
            return greedy.tolist()
        probs = torch.softmax(logits / temps.clamp(min=1e-5)[:, None], dim=-1)
        sampled = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
        return torch.where(temps > 0, sampled, greedy).tolist()

    def draft(
        self, seqs: list[Sequence], h: Tensor, starts: list[int], ends: list[int], query_lens: list[int]
    ):
        # MTP over every position committed this step: h_p with t_{p+1} -> t_{p+2}; then k-1 chained drafts
        live = [i for i, s in enumerate(seqs) if not s.is_finished and s.finish_reason is None]
        lens = [len(seqs[i]) - 1 - starts[i] for i in live]  # committed positions of this step
        rows = [
            r
            for i, n in zip(live, lens, strict=True)
            for r in range(ends[i] - query_lens[i], ends[i] - query_lens[i] + n)
        ]
        next_tokens = [
            t
            for i, n in zip(live, lens, strict=True)
            for t in seqs[i].token_ids[starts[i] + 1 : starts[i] + 1 + n]
        ]
        tables = [seqs[i].block_table for i in live]
        batch, positions = self.batch(tables, [starts[i] for i in live], lens)
        z, logits = self.model.draft(h[rows], self.as_tensor(next_tokens), positions, batch, depth=0)
        last = (torch.tensor(lens, device=h.device).cumsum(0) - 1).tolist()
        drafts = [[t] for t in (logits[last].argmax(-1).tolist() if live else [])]
        z, pos = z[last], [len(seqs[i]) - 1 for i in live]
        for depth in range(1, self.cfg.num_speculative_tokens):
            batch, positions = self.batch(tables, pos, [1] * len(live))
            z, logits = self.model.draft(z, self.as_tensor([d[-1] for d in drafts]), positions, batch, depth)
            for d, t in zip(drafts, logits.argmax(-1).tolist(), strict=True):
                d.append(t)
            pos = [p + 1 for p in pos]
        for i, d in zip(live, drafts, strict=True):
            if seqs[i].params.is_greedy:
                seqs[i].draft_token_ids = d[: seqs[i].params.max_tokens - seqs[i].num_output_tokens - 1]

    def as_tensor(self, values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.cfg.device)
