"""A simulated engine with the real Engine's surface: `step() -> (outputs, StepStats)`, placements and
routing limits staged and agreed across the EP group, requests that produce (made-up) tokens.

Per-expert load comes from agents/sim/load.py with a swing between two kinds of text, so hot experts
persist but move. Every rank of a group draws the same popularity (same seed, same number of steps,
kept in lockstep by the group's agreement). Each routes its own tokens and estimates what its slots
receive from the whole group under the placement it runs. Step time comes from agents/sim/cost.py:
all-to-all and expert time follow the busiest rank, so a better placement shows up as less time, as
on real hardware. It needs no model and almost no CPU: `moectl worker --sim` runs the real agent
over it.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from agents.protocol.placement import effective_share, gpu_load, slot_load
from agents.runtime.ep import EPGroup
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.sequence import SamplingParams
from agents.runtime.stats import MoECounters, RequestOutput, StepStats
from agents.runtime.tokenizer import encode
from agents.sim.cost import LINKS, step_times
from agents.sim.load import LoadModel
from agents.sim.reach import Reach, Routing, sample_reach

NOMINAL_STEP_SECONDS = 0.05  # the walk's time step: a fixed one keeps it identical on every rank


@dataclass(slots=True)
class SimConfig:
    num_layers: int = 4  # MoE layers
    num_experts: int = 32
    num_groups: int = 4
    top_k: int = 4
    topk_group: int = 2
    ep_size: int = 1
    ep_rank: int = 0
    slots_per_rank: int = 0  # 0: just enough for one copy of each expert
    gpus_per_node: int = 8  # ranks per node: sorts the slots a token reached into nodes
    links: str = "gpu-nodes"  # agents/sim/cost.py LINKS: what the all-to-all crosses
    num_speculative_tokens: int = 2
    num_background_seqs: int = 16  # synthetic decode batch besides real requests
    prefill_tokens_per_step: int = 96  # synthetic prompt tokens admitted per step
    prefix_hit_ratio: float = 0.55
    mtp_acceptance: float = 0.8
    drift_sigma: float = 0.05  # lognormal popularity walk, per simulated second
    swing_period_seconds: float = 120.0  # code <-> prose swing of the hot experts
    is_paced: bool = True  # sleep the simulated step time, so a sim worker runs at a real rate
    kv_capacity_tokens: int = 65536
    max_num_seqs: int = 64
    mean_context_tokens: int = 300  # of a sequence in the batch: the KV tokens it holds
    is_group_limit_bypassed: bool = False  # a production bug: the router silently ignores the group limit
    seed: int = 0

    def __post_init__(self) -> None:
        self.slots_per_rank = self.slots_per_rank or math.ceil(self.num_experts / self.ep_size)


class _Seq:
    def __init__(self, request_id: str, prompt: list[int], params: SamplingParams, now: float):
        self.request_id, self.prompt, self.params = request_id, prompt, params
        self.output: list[int] = []
        self.arrival_time, self.first_scheduled_time, self.first_token_time = now, None, None


class SimEngine:
    """One simulated rank. With ep_size > 1, every rank calls step() in lockstep, as the real one."""

    can_hand_off_kv: ClassVar[bool] = False  # no KV cache to hand off

    def __init__(self, cfg: SimConfig, group: EPGroup | None = None):
        self.cfg = cfg
        self.group = group or EPGroup(cfg.ep_rank, cfg.ep_size)
        self.num_slots = cfg.slots_per_rank * cfg.ep_size
        self.placement = Placement.default(cfg.num_layers, cfg.num_experts, self.num_slots)
        self.routing_limits = EngineRoutingLimits()
        self.pending_placement: Placement | None = None
        self.pending_limits: EngineRoutingLimits | None = None
        self.load = LoadModel(cfg.num_layers, cfg.num_experts, cfg.top_k, seed=cfg.seed,  # same on every rank
                              drift_sigma=cfg.drift_sigma * math.sqrt(NOMINAL_STEP_SECONDS),
                              swing_period_seconds=cfg.swing_period_seconds)
        self.rng = np.random.default_rng([cfg.seed, cfg.ep_rank])  # this rank's own draws
        self.seqs: dict[str, _Seq] = {}
        self.num_steps, self.is_group_idle = 0, False
        self._ids = itertools.count()
        self._slot_share = self._shares(self.placement)
        self._routing_tables = self.placement.routing_tables(cfg.num_experts)  # [L, E, R] each, for _reach
        self.links = LINKS[cfg.links]

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        request_id = request_id if request_id is not None else f"{self.cfg.ep_rank}-{next(self._ids)}"
        if request_id in self.seqs:
            raise ValueError(f"duplicate request id {request_id}")
        tokens = encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise ValueError("a request needs at least one prompt token")
        self.seqs[request_id] = _Seq(request_id, tokens, params or SamplingParams(), time.monotonic())
        return request_id

    def has_unfinished_requests(self) -> bool:
        return bool(self.seqs)

    def apply_placement(self, placement: Placement) -> None:
        placement.validate(self.cfg.num_layers, self.cfg.num_experts, self.num_slots)
        self.pending_placement = placement

    def apply_routing_limits(self, limits: EngineRoutingLimits) -> None:
        if limits.topk_group is not None and not 1 <= limits.topk_group <= self.cfg.num_groups:
            raise ValueError("topk_group out of range")
        self.pending_limits = limits

    def _agree(self) -> None:
        # the real Engine's rule: switch only at a step where every rank staged the same version
        pv = (self.pending_placement or self.placement).version
        rv = (self.pending_limits or self.routing_limits).version
        _, pv_max, pv_neg_min, rv_max, rv_neg_min = self.group.agree_max([1, pv, -pv, rv, -rv])
        if self.pending_placement and pv_max == -pv_neg_min and pv_max != self.placement.version:
            self.placement, self._slot_share = self.pending_placement, self._shares(self.pending_placement)
            self._routing_tables = self.placement.routing_tables(self.cfg.num_experts)
        if pv_max == -pv_neg_min:
            self.pending_placement = None
        if self.pending_limits and rv_max == -rv_neg_min and rv_max != self.routing_limits.version:
            self.routing_limits = self.pending_limits
        if rv_max == -rv_neg_min:
            self.pending_limits = None

    def _shares(self, placement: Placement) -> np.ndarray:
        """[num_layers, num_slots] share of its expert's tokens each slot takes."""
        share = placement.slot_share.numpy() if placement.slot_share is not None else None
        return effective_share(placement.slot_to_expert.numpy(), share, self.cfg.num_experts)

    def step(self) -> tuple[list[RequestOutput], StepStats]:
        t0 = time.perf_counter()
        cfg, rng = self.cfg, self.rng
        self._agree()
        now = time.monotonic()
        new = [s for s in self.seqs.values() if s.first_scheduled_time is None]
        running = [s for s in self.seqs.values() if s.first_scheduled_time is not None]
        for seq in new:
            seq.first_scheduled_time = now
        num_prefill = int(rng.poisson(cfg.prefill_tokens_per_step)) + sum(len(s.prompt) for s in new)
        num_decode_seqs = cfg.num_background_seqs + len(running)
        num_tokens = num_prefill + num_decode_seqs * (1 + cfg.num_speculative_tokens)

        # wall clock, not step count: every rank and instance sees the same swing at the same time
        popularity = self.load.popularity(time.time())  # [L, E]
        reach = self._reach(popularity, num_tokens)  # this step's tokens, routed under the limit in force
        expert_tokens = self.load.route(popularity, num_tokens, rng)  # [L, E]
        table = self.placement.slot_to_expert.numpy()  # [L, S]
        # what every slot of the group receives, if the other ranks route like this one
        group_slot_tokens = slot_load(table, expert_tokens, self._slot_share) * cfg.ep_size
        rank_rows = gpu_load(group_slot_tokens, cfg.ep_size)
        local = slice(cfg.ep_rank * cfg.slots_per_rank, (cfg.ep_rank + 1) * cfg.slots_per_rank)
        times = step_times(rank_rows, num_tokens, reach.traffic(cfg.top_k), self.links)
        dispatch, combine = times.dispatch_seconds, times.combine_seconds
        forward = times.forward_seconds * float(rng.lognormal(0.0, 0.05))

        num_drafts = num_decode_seqs if cfg.num_speculative_tokens else 0
        accepted_by_position = self._accepted(num_drafts, reach.quality(cfg.top_k))
        num_query = num_prefill
        num_hit = int(rng.binomial(num_query, cfg.prefix_hit_ratio)) if num_query else 0
        outputs = self._outputs(new, running, now)

        counters = MoECounters(
            expert_tokens=torch.from_numpy(expert_tokens.astype(np.int64)),
            slot_tokens=torch.from_numpy(np.rint(group_slot_tokens[:, local]).astype(np.int64)),
            recall_kept=torch.full((cfg.num_layers,), round(reach.recall(cfg.top_k) * num_tokens * cfg.top_k),
                                   dtype=torch.int64),
            recall_total=torch.full((cfg.num_layers,), num_tokens * cfg.top_k, dtype=torch.int64),
            dropped_tokens=torch.zeros(cfg.num_layers, dtype=torch.int64),
            dispatch_seconds=dispatch, dispatch_exposed_seconds=dispatch * 0.6,
            combine_seconds=combine, combine_exposed_seconds=combine,
            groups_per_token=reach.groups, nodes_per_token=reach.nodes)
        if cfg.is_paced:
            time.sleep(max(0.0, forward - (time.perf_counter() - t0)))
        self.load.drift()
        stats = StepStats(
            step=self.num_steps, timestamp=time.monotonic(), is_prefill=bool(new), num_scheduled_tokens=num_tokens,
            num_running=num_decode_seqs, num_waiting=int(rng.poisson(1.0)), num_preempted=0,
            kv_cache_usage=min(1.0, 0.3 + 0.02 * num_decode_seqs), forward_seconds=forward,
            step_seconds=time.perf_counter() - t0, moe=counters, prefix_query_tokens=num_query,
            prefix_hit_tokens=num_hit, spec_num_drafts=num_drafts,
            spec_draft_tokens=num_drafts * cfg.num_speculative_tokens,
            spec_accepted_tokens=sum(accepted_by_position), spec_accepted_by_position=accepted_by_position,
            placement_version=self.placement.version, routing_version=self.routing_limits.version,
            outputs=outputs, num_prefill_tokens=num_prefill,
            num_kv_tokens=min(cfg.kv_capacity_tokens, num_decode_seqs * cfg.mean_context_tokens),
            kv_capacity_tokens=cfg.kv_capacity_tokens, max_num_seqs=cfg.max_num_seqs)
        self.num_steps += 1
        return outputs, stats

    def _reach(self, popularity: np.ndarray, num_tokens: int) -> Reach:
        """This rank's tokens, routed with the limit in force, or past it when the limit is bypassed."""
        cfg = self.cfg
        topk_group = cfg.num_groups if cfg.is_group_limit_bypassed else self.routing_limits.topk_group or cfg.topk_group
        routing = Routing(cfg.num_groups, cfg.top_k, topk_group, *self._routing_tables, cfg.slots_per_rank,
                          cfg.gpus_per_node, cfg.ep_size, model_topk_group=cfg.topk_group)
        return sample_reach(popularity, num_tokens, self.rng, routing, home_rank=cfg.ep_rank)

    def _accepted(self, num_drafts: int, quality: float) -> list[int]:
        """Accepted tokens per draft position: position i counts drafts whose first i + 1 all matched.
        quality: what the routing in force leaves of the model's own (agents/sim/reach.py)."""
        accepted, alive = [], num_drafts
        p = float(np.clip(self.cfg.mtp_acceptance * quality + self.rng.normal(0.0, 0.02), 0.0, 1.0))
        for _ in range(self.cfg.num_speculative_tokens):
            alive = int(self.rng.binomial(alive, p)) if alive else 0
            accepted.append(alive)
        return accepted

    def _outputs(self, new: list[_Seq], running: list[_Seq], now: float) -> list[RequestOutput]:
        outputs = []
        for seq in new + running:
            count = 1 if seq in new else 1 + int(self.rng.binomial(self.cfg.num_speculative_tokens,
                                                                    self.cfg.mtp_acceptance))
            count = min(count, seq.params.max_tokens - len(seq.output))
            tokens = self.rng.integers(97, 123, count).tolist()  # lowercase letters
            seq.output += tokens
            if seq.first_token_time is None:
                seq.first_token_time = now
            is_finished = len(seq.output) >= seq.params.max_tokens
            if is_finished:
                del self.seqs[seq.request_id]
            outputs.append(RequestOutput(
                request_id=seq.request_id, new_token_ids=tokens, is_finished=is_finished,
                finish_reason="length" if is_finished else None, num_prompt_tokens=len(seq.prompt),
                num_cached_tokens=0, num_output_tokens=len(seq.output), arrival_time=seq.arrival_time,
                first_scheduled_time=seq.first_scheduled_time, first_token_time=seq.first_token_time))
        return outputs
