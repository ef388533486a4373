import itertools
import math
import time
from typing import ClassVar

import torch

from agents.runtime.block_manager import BlockManager
from agents.runtime.config import EngineConfig
from agents.runtime.ep import EPGroup, ExpertParallel
from agents.runtime.model import Transformer, load_checkpoint
from agents.runtime.model_runner import ModelRunner
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.scheduler import Scheduler
from agents.runtime.sequence import SamplingParams, Sequence
from agents.runtime.stats import RequestOutput, StepStats
from agents.runtime.tokenizer import encode


class Engine:
    """One rank of an instance. With ep_size > 1 every rank calls step() in lockstep (collectives inside)."""

    can_hand_off_kv: ClassVar[bool] = True  # kv_transfer.py exports and imports its requests' KV

    def __init__(self, cfg: EngineConfig, group: EPGroup | None = None, model: Transformer | None = None):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.model = (model or load_checkpoint(cfg.checkpoint)).to(cfg.device).eval()
        mc = self.model.cfg
        self.group = group or EPGroup(cfg.ep_rank, cfg.ep_size)
        if self.group.size != cfg.ep_size or self.group.rank != cfg.ep_rank:
            raise ValueError("EP group does not match ep_rank/ep_size")
        slots_per_rank = cfg.slots_per_rank or math.ceil(mc.num_experts / cfg.ep_size)
        self.ep = ExpertParallel(mc, self.group, slots_per_rank, cfg.device, cfg.overlap_shared_expert,
                                 cfg.quantize_dispatch, cfg.gpus_per_node, cfg.dispatch_split)
        for moe in self.model.moes:
            moe.ep = self.ep
        self.ep.apply_placement(
            Placement.default(mc.num_moe_layers, mc.num_experts, self.ep.num_slots), self.model.moes
        )
        self.block_manager = BlockManager(cfg.num_kv_blocks, cfg.block_size)
        self.scheduler = Scheduler(cfg, self.block_manager)
        self.runner = ModelRunner(self.model, cfg)
        self.pending_placement: Placement | None = None
        self.pending_limits: EngineRoutingLimits | None = None
        self.seqs: dict[str, Sequence] = {}
        self.num_steps = 0
        self.switch_seconds: float | None = None  # the placement switch this step made, timed; None: none
        self.is_group_idle = True
        self._ids = itertools.count()

    @property
    def placement(self) -> Placement:
        return self.ep.placement

    @property
    def routing_limits(self) -> EngineRoutingLimits:
        return self.ep.limits

    @property
    def num_slots(self) -> int:
        return self.ep.num_slots

    def add_request(
        self, prompt: str | list[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        params = params or SamplingParams()
        token_ids = encode(prompt) if isinstance(prompt, str) else list(prompt)
        request_id = request_id if request_id is not None else f"{self.group.rank}-{next(self._ids)}"
        max_len = len(token_ids) + params.max_tokens + 2 * self.cfg.num_speculative_tokens
        if max_len > self.model.cfg.max_seq_len:
            raise ValueError(f"prompt + max_tokens exceeds max_seq_len {self.model.cfg.max_seq_len}")
        if math.ceil(max_len / self.cfg.block_size) > self.cfg.num_kv_blocks:
            raise ValueError("request cannot fit in the KV cache")
        if request_id in self.seqs:
            raise ValueError(f"duplicate request id {request_id}")
        seq = Sequence(request_id, token_ids, params, time.monotonic())
        self.seqs[request_id] = seq
        self.scheduler.add(seq)
        return request_id

    def apply_placement(self, placement: Placement) -> None:
        """Stage a placement; every rank switches at the first step where all ranks staged this version."""
        placement.validate(self.model.cfg.num_moe_layers, self.model.cfg.num_experts, self.ep.num_slots)
        self.pending_placement = placement

    def apply_routing_limits(self, limits: EngineRoutingLimits) -> None:
        """Stage routing limits; applied like a placement, at a step boundary agreed by the group."""
        if limits.topk_group is not None and not 1 <= limits.topk_group <= self.model.cfg.num_groups:
            raise ValueError("topk_group out of range")
        if limits.topk_group is not None:
            experts = limits.topk_group * self.model.cfg.experts_per_group
            if experts < self.model.cfg.top_k:
                raise ValueError("topk_group leaves fewer experts than top_k")
        if limits.max_tokens_per_expert is not None and limits.max_tokens_per_expert < 0:
            raise ValueError("max_tokens_per_expert must be >= 0")
        self.pending_limits = limits

    def abort_request(self, request_id: str) -> bool:
        seq = self.seqs.pop(request_id, None)
        if seq is None:
            return False
        seq.finish_reason = "abort"
        if seq in self.scheduler.waiting:
            self.scheduler.waiting.remove(seq)
        else:
            self.scheduler.finish(seq)
        return True

    def has_unfinished_requests(self) -> bool:
        return not self.scheduler.is_finished()

    def _agree(self) -> bool:
        pv = (self.pending_placement or self.placement).version
        rv = (self.pending_limits or self.routing_limits).version
        has_work, pv_max, pv_neg_min, rv_max, rv_neg_min = self.group.agree_max(
            [int(self.has_unfinished_requests()), pv, -pv, rv, -rv]
        )
        self.switch_seconds = None
        if self.pending_placement and pv_max == -pv_neg_min and pv_max != self.placement.version:
            started = time.perf_counter()  # what a change costs the group: no step runs while its weights move
            self.ep.apply_placement(self.pending_placement, self.model.moes)
            self.switch_seconds = time.perf_counter() - started
        if pv_max == -pv_neg_min:
            self.pending_placement = None
        if self.pending_limits and rv_max == -rv_neg_min and rv_max != self.routing_limits.version:
            self.ep.limits = self.pending_limits
        if rv_max == -rv_neg_min:
            self.pending_limits = None
        self.is_group_idle = not has_work
        return bool(has_work)

    def step(self) -> tuple[list[RequestOutput], StepStats]:
        t0 = time.perf_counter()
        self.ep.counters = self.ep.new_counters()
        has_work = self._agree()
        query0, hit0 = self.block_manager.num_query_tokens, self.block_manager.num_hit_tokens
        seqs, is_prefill, num_preempted = self.scheduler.schedule() if has_work else ([], False, 0)
        now = time.monotonic()
        for seq in seqs:
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
        num_tokens = sum(len(s) - s.num_computed_tokens + len(s.draft_token_ids) for s in seqs)
        num_prefill_tokens = sum(len(s) - s.num_computed_tokens for s in seqs) if is_prefill else 0
        result = self.runner.run(seqs) if has_work else None
        now = time.monotonic()
        outputs = []
        for seq, new in zip(seqs, result.new_token_ids if result else [], strict=True):
            if seq.first_token_time is None and new:
                seq.first_token_time = now
            if seq.finish_reason is not None:
                self.scheduler.finish(seq)
                del self.seqs[seq.request_id]
            else:
                self.block_manager.cache_full_blocks(seq)
            outputs.append(self._output(seq, new))
        stats = StepStats(
            step=self.num_steps,
            timestamp=now,
            is_prefill=is_prefill,
            num_scheduled_tokens=num_tokens,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            num_preempted=num_preempted,
            kv_cache_usage=self.block_manager.usage,
            forward_seconds=result.forward_seconds if result else 0.0,
            step_seconds=0.0,
            moe=self.ep.counters,
            prefix_query_tokens=self.block_manager.num_query_tokens - query0,
            prefix_hit_tokens=self.block_manager.num_hit_tokens - hit0,
            spec_num_drafts=result.num_drafts if result else 0,
            spec_draft_tokens=result.num_draft_tokens if result else 0,
            spec_accepted_tokens=result.num_accepted_tokens if result else 0,
            spec_accepted_by_position=result.accepted_by_position if result else [],
            placement_version=self.placement.version,
            placement_switch_seconds=self.switch_seconds,
            routing_version=self.routing_limits.version,
            outputs=outputs,
            num_prefill_tokens=num_prefill_tokens,
            num_waiting_tokens=sum(len(s) for s in self.scheduler.waiting),
            num_kv_tokens=sum(len(s) for s in self.scheduler.running),
            kv_capacity_tokens=self.cfg.num_kv_blocks * self.cfg.block_size,
            max_num_seqs=self.cfg.max_num_seqs,
        )
        stats.step_seconds = time.perf_counter() - t0
        self.num_steps += 1
        return outputs, stats

    def _output(self, seq: Sequence, new: list[int]) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=new,
            is_finished=seq.finish_reason is not None,
            finish_reason=seq.finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            num_output_tokens=seq.num_output_tokens,
            arrival_time=seq.arrival_time,
            first_scheduled_time=seq.first_scheduled_time,
            first_token_time=seq.first_token_time,
        )

    def generate(self, prompts: list, params: SamplingParams | None = None) -> list[list[int]]:
        ids = [self.add_request(p, params) for p in prompts]
        tokens: dict[str, list[int]] = {i: [] for i in ids}
        while True:
            outputs, _ = self.step()
            for out in outputs:
                if out.request_id in tokens:
                    tokens[out.request_id] += out.new_token_ids
            if self.is_group_idle:
                break
        return [tokens[i] for i in ids]
