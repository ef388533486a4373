"""Hand-made engine steps for agent tests: a StepStats with fixed MoE counters, and a request's output."""

from __future__ import annotations

import torch

from agents.runtime.stats import MoECounters, RequestOutput, StepStats


def step(i: int, now: float, *, outputs=(), forward=0.01, layer0=(4, 0), groups=None, nodes=None) -> StepStats:
    """groups, nodes: [top_k + 1] tokens per layer by the groups / nodes they reached (default: not counted)."""
    moe = MoECounters.zeros(4, 32, 20, "cpu", top_k=4 if groups is not None else None)
    if groups is not None:
        moe.groups_per_token += torch.tensor(groups)
        moe.nodes_per_token += torch.tensor(nodes if nodes is not None else groups)
    moe.expert_tokens[0, 0], moe.expert_tokens[0, 1] = layer0
    moe.slot_tokens[:, 0] = 3
    moe.recall_kept += 3
    moe.recall_total += 4
    moe.dispatch_seconds, moe.combine_seconds = 0.002, 0.001
    return StepStats(step=i, timestamp=now, is_prefill=False, num_scheduled_tokens=8, num_running=2, num_waiting=1,
                     num_preempted=0, kv_cache_usage=0.25, forward_seconds=forward, step_seconds=forward, moe=moe,
                     prefix_query_tokens=32, prefix_hit_tokens=16, spec_num_drafts=2, spec_draft_tokens=4,
                     spec_accepted_tokens=3, spec_accepted_by_position=[2, 1], placement_version=0,
                     outputs=list(outputs))


def output(rid: str, new: list[int], num_output: int, *, arrival=0.0, first=None, finished=False) -> RequestOutput:
    return RequestOutput(request_id=rid, new_token_ids=new, is_finished=finished, finish_reason=None,
                         num_prompt_tokens=5, num_cached_tokens=0, num_output_tokens=num_output,
                         arrival_time=arrival, first_scheduled_time=arrival + 0.01, first_token_time=first)
