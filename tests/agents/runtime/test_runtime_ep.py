import pytest
import torch

from agents.runtime.config import CHECKPOINT_DIR, EngineConfig
from agents.runtime.engine import Engine
from agents.runtime.ep import EPGroup
from agents.runtime.launch import run_group
from agents.runtime.model import load_checkpoint
from agents.runtime.placement import Placement
from agents.runtime.sequence import SamplingParams
from agents.runtime.tokenizer import encode

PROMPTS = [
    "def read_config(path):\n    with open(path) as f:\n",
    "The interpreter acts as a simple calculator: you can type an expression",
    "import os\nimport sys\n\n",
    "class Queue:\n    def __init__(self, maxsize=0):\n        self.maxsize = maxsize\n",
    "Exceptions are raised when",
    "for i in range(10):\n",
]
NUM_TOKENS = 10


def placements(num_slots: int, seed: int) -> list[Placement]:
    g = torch.Generator().manual_seed(seed)
    rows, shares = [], []
    for _ in range(4):
        row = torch.cat(
            [torch.randperm(32, generator=g), torch.randint(0, 32, (num_slots - 32,), generator=g)]
        )
        rows.append(row[torch.randperm(num_slots, generator=g)])
        shares.append(torch.rand(num_slots, generator=g) * 3 + 0.05)
    replicated = Placement(torch.stack(rows), torch.stack(shares), version=1)
    shifted = Placement((torch.arange(num_slots) * 7 % 32).repeat(4, 1), version=2)  # replicas, equal shares
    return [replicated, shifted]


@torch.inference_mode()
def reference(model, prompt: str) -> tuple[torch.Tensor, list[int]]:
    ids = encode(prompt)
    first = None
    for _ in range(NUM_TOKENS):
        logits = model.logits(model.trunk(torch.tensor([ids]), torch.arange(len(ids))))[0, -1]
        first = logits if first is None else first
        ids.append(int(logits.argmax()))
    return first, ids[-NUM_TOKENS:]


def ep_worker(
    rank: int, size: int, slots_per_rank: int, switch_steps: list[int], overlap: bool, spec: int = 0
) -> dict:
    model = load_checkpoint(CHECKPOINT_DIR)
    prompts = PROMPTS[rank::size]
    refs = [reference(model, p) for p in prompts]
    cfg = EngineConfig(
        ep_size=size,
        ep_rank=rank,
        slots_per_rank=slots_per_rank,
        block_size=8,
        num_kv_blocks=64,
        overlap_shared_expert=overlap,
        num_speculative_tokens=spec,
    )
    eng = Engine(cfg, group=EPGroup(rank, size), model=model)
    first, second = placements(size * slots_per_rank, seed=size)
    eng.apply_placement(first)
    ids = [eng.add_request(p, SamplingParams(max_tokens=NUM_TOKENS)) for p in prompts]
    tokens, versions, max_diff = {i: [] for i in ids}, [], None
    expert_tokens = torch.zeros(4, 32, dtype=torch.int64)
    slot_tokens = torch.zeros(4, slots_per_rank, dtype=torch.int64)
    a2a, accepted = 0.0, 0
    while True:
        if eng.num_steps == switch_steps[rank]:
            eng.apply_placement(second)
        outputs, st = eng.step()
        if max_diff is None and prompts:  # the prefill step: last-position logits of every prompt
            max_diff = (eng.runner.last_logits - torch.stack([r[0] for r in refs])).abs().max().item()
        versions.append(st.placement_version)
        expert_tokens += st.moe.expert_tokens
        slot_tokens += st.moe.slot_tokens
        a2a += st.all2all_seconds
        accepted += st.spec_accepted_tokens
        for out in outputs:
            tokens[out.request_id] += out.new_token_ids
        if eng.is_group_idle:
            break
    return {
        "max_diff": max_diff or 0.0,
        "tokens_equal": [tokens[i] for i in ids] == [r[1] for r in refs],
        "versions": versions,
        "expert_tokens": expert_tokens,
        "slot_tokens": slot_tokens,
        "a2a_seconds": a2a,
        "accepted": accepted,
        "slots": (first.slot_to_expert, second.slot_to_expert),
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "size,slots_per_rank,overlap,spec",
    [(2, 20, True, 0), (4, 10, False, 0), (4, 9, True, 1), (2, 16, False, 2)],
)
def test_expert_parallel_matches_single_process(size, slots_per_rank, overlap, spec):
    switch_steps = [2 + rank for rank in range(size)]  # ranks stage the new placement at different steps
    results = run_group(ep_worker, size, (slots_per_rank, switch_steps, overlap, spec), timeout=200)
    for r in results:
        assert r["max_diff"] < 1e-3
        assert r["tokens_equal"]
        assert r["a2a_seconds"] > 0
    versions = [r["versions"] for r in results]
    assert all(v == versions[0] for v in versions)  # every rank switched at the same step
    switch = max(switch_steps)
    assert versions[0][:switch] == [1] * switch and versions[0][switch] == 2
    routed = sum(r["expert_tokens"] for r in results)  # [L, E] assignments routed by all ranks
    processed = torch.cat([r["slot_tokens"] for r in results], dim=1)  # [L, S] rows each slot computed
    assert torch.equal(routed.sum(1), processed.sum(1))
    assert (routed > 0).sum() > 64
    assert (sum(r["accepted"] for r in results) > 0) == (spec > 0)  # MTP drafts verified under EP
