import pytest
import torch
import torch.nn.functional as F

from agents.runtime import moe_ops
from agents.runtime.placement import Placement

torch.set_num_threads(1)


def scores_and_bias(num_tokens=64, num_experts=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(num_tokens, num_experts, generator=g), torch.randn(num_experts, generator=g) * 0.1


@pytest.mark.parametrize("topk_group", [1, 2, 3, 4])
def test_grouped_topk_stays_within_the_best_groups(topk_group):
    scores, bias = scores_and_bias()
    weights, ids = moe_ops.grouped_topk(scores, bias, 4, topk_group, 4, 2.5)
    groups = ids // 8  # [T, K]
    biased = (scores + bias).view(-1, 4, 8)
    best = biased.topk(2, -1).values.sum(-1).topk(topk_group, -1).indices  # [T, topk_group]
    assert all(set(g.tolist()) <= set(b.tolist()) for g, b in zip(groups, best, strict=True))
    assert torch.allclose(weights.sum(-1), torch.full((64,), 2.5))
    assert torch.equal(weights, scores.gather(1, ids) / scores.gather(1, ids).sum(-1, keepdim=True) * 2.5)
    if topk_group == 1:
        assert (groups == groups[:, :1]).all()


def test_bias_steers_selection_but_not_weights():
    scores, _ = scores_and_bias()
    bias = torch.zeros(32)
    bias[5] = 10.0
    weights, ids = moe_ops.grouped_topk(scores, bias, 4, 4, 4, 1.0)
    assert (ids == 5).any(-1).all()
    assert torch.allclose(weights.sum(-1), torch.ones(64))
    col = (ids == 5).float().argmax(-1)
    assert torch.allclose(
        weights.gather(1, col[:, None]).squeeze(1) * scores.gather(1, ids).sum(-1), scores[:, 5]
    )


def test_recall_counts_unconstrained_choices_kept():
    scores, bias = scores_and_bias()
    _, free = moe_ops.grouped_topk(scores, bias, 4, 4, 4, 1.0)
    assert moe_ops.routing_recall(scores, bias, free) == free.numel()
    _, limited = moe_ops.grouped_topk(scores, bias, 4, 1, 4, 1.0)
    kept = moe_ops.routing_recall(scores, bias, limited)
    assert 0 < kept < free.numel()


def test_capacity_keeps_the_heaviest_assignments():
    scores, bias = scores_and_bias(num_tokens=100)
    weights, ids = moe_ops.grouped_topk(scores, bias, 4, 2, 4, 1.0)
    w, kept = moe_ops.limit_capacity(weights, ids, 32, 5)
    counts = moe_ops.histogram(kept, 32)
    assert counts.max() <= 5
    assert torch.equal(counts, torch.minimum(moe_ops.histogram(ids, 32), torch.tensor(5)))
    assert (w[kept < 0] == 0).all() and torch.equal(w[kept >= 0], weights[kept >= 0])
    for e in range(32):
        dropped, held = weights[(ids == e) & (kept < 0)], weights[kept == e]
        if len(dropped):
            assert dropped.max() <= held.min()


def test_histogram_matches_bincount_and_ignores_dropped():
    ids = torch.randint(-1, 16, (200, 4), generator=torch.Generator().manual_seed(1))
    expected = torch.bincount(ids[ids >= 0], minlength=16)
    assert torch.equal(moe_ops.histogram(ids, 16), expected)


def test_permute_then_unpermute_is_identity_and_grouped():
    slot_ids = torch.randint(-1, 10, (50, 4), generator=torch.Generator().manual_seed(2))
    order, counts = moe_ops.permute(slot_ids, 10)
    flat = slot_ids.flatten()
    assert torch.equal(counts, moe_ops.histogram(flat, 10))
    sorted_slots = flat[order][: counts.sum()]
    assert (sorted_slots[1:] >= sorted_slots[:-1]).all()
    rows = torch.randn(flat.numel(), 3)
    back = moe_ops.unpermute(rows[order][: counts.sum()], order, flat.numel())
    assert torch.equal(back[flat >= 0], rows[flat >= 0]) and (back[flat < 0] == 0).all()


def test_grouped_swiglu_and_combine_match_a_per_token_loop():
    g = torch.Generator().manual_seed(3)
    num_tokens, dim, inter, num_experts, top_k = 20, 16, 8, 6, 2
    x = torch.randn(num_tokens, dim, generator=g)
    w13 = torch.randn(num_experts, 2 * inter, dim, generator=g)
    w2 = torch.randn(num_experts, dim, inter, generator=g)
    weights = torch.rand(num_tokens, top_k, generator=g)
    ids = torch.stack([torch.randperm(num_experts, generator=g)[:top_k] for _ in range(num_tokens)])
    order, counts = moe_ops.permute(ids, num_experts)
    y = moe_ops.grouped_swiglu(x[order // top_k], counts, w13, w2)
    out = moe_ops.combine(moe_ops.unpermute(y, order, ids.numel()), weights)
    expected = torch.zeros(num_tokens, dim)
    for t in range(num_tokens):
        for k in range(top_k):
            gate, up = (w13[ids[t, k]] @ x[t]).chunk(2)
            expected[t] += weights[t, k] * (w2[ids[t, k]] @ (F.silu(gate) * up))
    assert torch.allclose(out, expected, atol=1e-4, rtol=1e-4)


def test_select_slots_spreads_by_share():
    slot_to_expert = torch.tensor([[0, 1, 2, 3, 0, 0]])
    share = torch.tensor([[1.0, 1.0, 1.0, 1.0, 3.0, 0.0]])
    e2s, cum = Placement(slot_to_expert, share).routing_tables(4)
    ids = torch.zeros(4000, 1, dtype=torch.int64)
    slots = moe_ops.select_slots(ids, e2s[0], cum[0])
    counts = moe_ops.histogram(slots, 6)
    assert counts[5] == 0 and counts[1:4].sum() == 0
    assert abs(counts[4] / counts[0] - 3.0) < 0.05
    assert torch.equal(moe_ops.select_slots(torch.tensor([[1, -1]]), e2s[0], cum[0]), torch.tensor([[1, -1]]))


def test_reach_counts_the_distinct_groups_and_nodes_of_each_token():
    # 16 experts in 4 groups of 4; 12 slots, 3 per rank, 2 ranks per node: slot s is on node s // 6
    topk_ids = torch.tensor([[0, 1, 2, 3], [0, 4, 8, 12], [0, 5, -1, -1], [-1, -1, -1, -1], [3, 7, 6, 5]])
    slot_ids = torch.tensor([[0, 1, 2, 3], [0, 4, 8, 11], [0, 7, -1, -1], [-1, -1, -1, -1], [6, 7, 9, 11]])
    groups, nodes = moe_ops.reach(topk_ids, slot_ids, experts_per_group=4, num_groups=4, slots_per_node=6,
                                  num_nodes=2)
    # groups per token: 1, 4, 2, 0 (all dropped), 2; nodes: 1, 2, 2, 0, 1
    assert groups.tolist() == [1, 1, 2, 0, 1] and nodes.tolist() == [1, 2, 2, 0, 0]


def test_num_distinct_matches_a_set_per_row():
    ids = torch.randint(-1, 6, (300, 5), generator=torch.Generator().manual_seed(3))
    expected = [len({v for v in row if v >= 0}) for row in ids.tolist()]
    assert moe_ops.num_distinct(ids, 6).tolist() == expected
