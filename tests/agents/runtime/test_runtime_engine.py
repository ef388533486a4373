import pytest
import torch

from agents.runtime import kernels
from agents.runtime.config import CHECKPOINT_DIR, EngineConfig
from agents.runtime.engine import Engine
from agents.runtime.model import load_checkpoint
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.sequence import SamplingParams
from agents.runtime.tokenizer import encode

torch.set_num_threads(1)

PROMPTS = [
    "def read_config(path):\n    with open(path) as f:\n",
    "The interpreter acts as a simple calculator: you can type an expression",
    "import os\nimport sys\n\n",
    "class Queue:\n    def __init__(self, maxsize=0):\n        self.maxsize = maxsize\n",
]


@pytest.fixture(scope="module")
def model():
    return load_checkpoint(CHECKPOINT_DIR)


def engine(model, **kw) -> Engine:
    for moe in model.moes:
        moe.ep = None
    return Engine(EngineConfig(**({"block_size": 8, "num_kv_blocks": 128} | kw)), model=model)


@torch.inference_mode()
def naive_greedy(model, prompt: str, num_tokens: int) -> list[int]:
    for moe in model.moes:
        moe.ep = None
    ids = encode(prompt)
    for _ in range(num_tokens):
        h = model.trunk(torch.tensor([ids]), torch.arange(len(ids)))
        ids.append(int(model.logits(h)[0, -1].argmax()))
    return ids[-num_tokens:]


def run(eng: Engine, prompts, params) -> tuple[list[list[int]], list]:
    ids = [eng.add_request(p, params) for p in prompts]
    tokens, stats = {i: [] for i in ids}, []
    while eng.has_unfinished_requests():
        outputs, st = eng.step()
        stats.append(st)
        for out in outputs:
            tokens[out.request_id] += out.new_token_ids
    return [tokens[i] for i in ids], stats


def test_batched_paged_decoding_matches_full_recompute(model):
    expected = [naive_greedy(model, p, 12) for p in PROMPTS]
    got, stats = run(engine(model, block_size=4), PROMPTS, SamplingParams(max_tokens=12))
    assert got == expected
    assert stats[0].is_prefill and stats[0].num_scheduled_tokens == sum(len(encode(p)) for p in PROMPTS)
    assert not stats[1].is_prefill and stats[1].num_scheduled_tokens == len(PROMPTS)
    assert all(s.forward_seconds > 0 for s in stats)


@pytest.mark.parametrize("num_speculative_tokens", [1, 2])
def test_mtp_speculative_decoding_is_exactly_greedy(model, num_speculative_tokens):
    params = SamplingParams(max_tokens=24)
    plain, _ = run(engine(model), PROMPTS, params)
    spec, stats = run(engine(model, num_speculative_tokens=num_speculative_tokens), PROMPTS, params)
    assert spec == plain
    drafted = sum(s.spec_draft_tokens for s in stats)
    accepted = sum(s.spec_accepted_tokens for s in stats)
    by_pos = [sum(s.spec_accepted_by_position[i] for s in stats) for i in range(num_speculative_tokens)]
    assert drafted > 0 and 0 < accepted <= drafted
    assert sum(by_pos) == accepted and by_pos == sorted(by_pos, reverse=True)
    assert len(stats) < len(plain[0]) + 1  # accepted drafts save steps


def test_prefix_cache_hits_whole_shared_blocks(model):
    eng = engine(model, block_size=8)
    base = encode("0123456789abcdefghijklmnopqrstuv")  # 4 blocks of 8
    a = base + encode("-first request")
    b = base[:16] + encode("XYZ") + base[19:] + encode("-second")  # shares exactly 2 blocks
    _, stats_a = run(eng, [a], SamplingParams(max_tokens=4))
    _, stats_b = run(eng, [b], SamplingParams(max_tokens=4))
    _, stats_c = run(eng, [a], SamplingParams(max_tokens=4))
    assert (stats_a[0].prefix_query_tokens, stats_a[0].prefix_hit_tokens) == (len(a), 0)
    assert (stats_b[0].prefix_query_tokens, stats_b[0].prefix_hit_tokens) == (len(b), 16)
    assert stats_c[0].prefix_hit_tokens == (len(a) - 1) // 8 * 8
    assert stats_c[0].num_scheduled_tokens == len(a) - stats_c[0].prefix_hit_tokens


def test_prefix_hits_and_eviction_never_change_outputs(model):
    prompts = [PROMPTS[0] + PROMPTS[i % 4] for i in range(8)]
    params = SamplingParams(max_tokens=16)
    roomy, _ = run(engine(model, num_kv_blocks=256), prompts, params)
    tight = engine(model, block_size=4, num_kv_blocks=40, max_num_seqs=8)
    got, stats = run(tight, prompts, params)
    assert got == roomy
    assert sum(s.num_preempted for s in stats) > 0
    assert sum(s.prefix_hit_tokens for s in stats) > 0
    again, stats2 = run(tight, [encode(p) for p in prompts[:1]], params)
    assert again == roomy[:1]
    evicting = engine(model, block_size=4, num_kv_blocks=40)
    full_hit = (len(encode(prompts[0])) - 1) // 4 * 4
    run(evicting, [prompts[0]], params)
    run(evicting, [PROMPTS[1] + PROMPTS[2]], params)  # needs most blocks: the chain tail is evicted
    out, stats3 = run(evicting, [prompts[0]], params)
    assert 0 < stats3[0].prefix_hit_tokens < full_hit
    assert out == roomy[:1]


def replicated_placement(num_layers=4, num_experts=32, num_slots=40, version=1, seed=0) -> Placement:
    g = torch.Generator().manual_seed(seed)
    rows, shares = [], []
    for _ in range(num_layers):
        extra = torch.randperm(num_experts, generator=g)[: num_slots - num_experts]
        row = torch.cat([torch.randperm(num_experts, generator=g), extra])
        rows.append(row[torch.randperm(num_slots, generator=g)])
        shares.append(torch.rand(num_slots, generator=g) + 0.1)
    shares = torch.stack(shares)
    return Placement(torch.stack(rows), shares, version=version)


def test_placement_switch_mid_generation_keeps_tokens(model):
    params = SamplingParams(max_tokens=16)
    plain, _ = run(engine(model, slots_per_rank=40), PROMPTS, params)
    eng = engine(model, slots_per_rank=40)
    placement = replicated_placement()
    zero_slot = 0
    placement.slot_share[:, zero_slot] = 0.0  # an expert's replica that receives nothing
    expert = placement.slot_to_expert[:, zero_slot]
    for layer in range(4):
        if (placement.slot_to_expert[layer] == expert[layer]).sum() < 2:
            placement.slot_share[layer, zero_slot] = 1.0
    ids = [eng.add_request(p, params) for p in PROMPTS]
    tokens, versions, slot_tokens = {i: [] for i in ids}, [], torch.zeros(4, 40, dtype=torch.int64)
    while eng.has_unfinished_requests():
        if eng.num_steps == 3:
            eng.apply_placement(placement)
        outputs, st = eng.step()
        versions.append(st.placement_version)
        if st.placement_version == 1:
            slot_tokens += st.moe.slot_tokens
        assert torch.equal(st.moe.slot_tokens.sum(1), st.moe.expert_tokens.sum(1))
        for out in outputs:
            tokens[out.request_id] += out.new_token_ids
    assert [tokens[i] for i in ids] == plain
    assert versions[:3] == [0, 0, 0] and set(versions[3:]) == {1}
    for layer in range(4):
        if placement.slot_share[layer, zero_slot] == 0:
            assert slot_tokens[layer, zero_slot] == 0
    assert (slot_tokens > 0).sum() > 100


def test_routing_limits_apply_at_a_step_boundary(model):
    eng = engine(model)
    eng.add_request(PROMPTS[0], SamplingParams(max_tokens=8))
    eng.step()
    eng.apply_routing_limits(EngineRoutingLimits(version=1, topk_group=4))
    _, unlimited = eng.step()
    assert torch.equal(unlimited.moe.recall_kept, unlimited.moe.recall_total)
    eng.apply_routing_limits(EngineRoutingLimits(version=2, topk_group=1, max_tokens_per_expert=0))
    assert eng.routing_limits.version == 1  # staged, not yet applied
    _, limited = eng.step()
    assert limited.routing_version == 2
    assert (limited.moe.expert_tokens == 0).all()
    assert torch.equal(limited.moe.dropped_tokens, limited.moe.recall_total)  # every assignment dropped
    assert limited.moe.dropped_tokens[:3].tolist() == [
        4,
        4,
        4,
    ]  # 1 token x top-4; MTP layer idle without drafts
    eng.apply_routing_limits(EngineRoutingLimits(version=3, topk_group=1))
    _, one_group = eng.step()
    assert (one_group.moe.recall_kept < one_group.moe.recall_total).any()
    assert one_group.num_scheduled_tokens == 1
    for layer in range(3):  # the single token's 4 experts sit in one group of 8
        experts = one_group.moe.expert_tokens[layer].nonzero().flatten()
        assert len(experts) == 4 and len(set((experts // 8).tolist())) == 1
    with pytest.raises(ValueError):
        eng.apply_routing_limits(EngineRoutingLimits(version=4, topk_group=9))


def test_sampling_is_seeded_and_stats_carry_request_times(model):
    params = SamplingParams(temperature=0.8, max_tokens=10)
    a, stats = run(engine(model, seed=1), PROMPTS, params)
    b, _ = run(engine(model, seed=1), PROMPTS, params)
    assert a == b and all(len(x) == 10 for x in a)
    finished = [o for s in stats for o in s.outputs if o.is_finished]
    assert len(finished) == len(PROMPTS) and all(o.finish_reason == "length" for o in finished)
    for o in finished:
        assert o.arrival_time <= o.first_scheduled_time <= o.first_token_time <= stats[-1].timestamp
    assert stats[0].num_running == len(PROMPTS) and stats[-1].num_running == 0
    assert 0 < max(s.kv_cache_usage for s in stats) < 1


def test_the_engine_counts_the_groups_each_token_reached_and_sees_a_bypassed_limit(model, monkeypatch):
    def groups_reached(topk_group: int) -> torch.Tensor:
        eng = engine(model)
        eng.apply_routing_limits(EngineRoutingLimits(version=topk_group, topk_group=topk_group))
        _, stats = run(eng, PROMPTS, SamplingParams(max_tokens=6))
        total = sum(s.moe.groups_per_token for s in stats)  # [L, top_k + 1]
        tokens = sum(s.num_scheduled_tokens for s in stats)
        assert total[:3].sum(1).tolist() == [tokens] * 3  # every token of every (non-MTP) MoE layer, once
        assert torch.equal(sum(s.moe.nodes_per_token for s in stats)[:3, 1], total[:3].sum(1))  # one node
        return total.sum(0)

    assert groups_reached(1).tolist()[2:] == [0, 0, 0]
    limited = groups_reached(2)
    assert limited[3:].sum() == 0 and limited[2] > 0
    free = groups_reached(4)
    assert free[3:].sum() > 0  # unlimited, tokens of this model reach 3 and 4 groups

    # a production bug: the routing path ignores the limit it is given; the counters show it
    ops = kernels.torch_ops()
    limited_topk = ops.grouped_topk
    monkeypatch.setattr(ops, "grouped_topk", lambda scores, bias, num_groups, topk_group, *rest, **kw:
                        limited_topk(scores, bias, num_groups, num_groups, *rest, **kw))
    assert torch.equal(groups_reached(2), free)
