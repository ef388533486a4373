"""The dispatch-time split in the runtime: same top-k, same weights, so the same output as the fixed shares; every
GPU receives exactly the split's quota, so the reported straggler is the measured one."""

import pytest
import torch

from agents.runtime.config import CHECKPOINT_DIR, EngineConfig
from agents.runtime.engine import Engine
from agents.runtime.ep import EPGroup
from agents.runtime.launch import run_group
from agents.runtime.model import load_checkpoint
from agents.runtime.sequence import SamplingParams
from tests.agents.runtime.test_runtime_ep import PROMPTS, placements

NUM_TOKENS = 8


def run(model, rank: int, size: int, slots_per_rank: int, dispatch_split: str) -> dict:
    cfg = EngineConfig(ep_size=size, ep_rank=rank, slots_per_rank=slots_per_rank, block_size=8, num_kv_blocks=64,
                       overlap_shared_expert=False, dispatch_split=dispatch_split)
    eng = Engine(cfg, group=EPGroup(rank, size), model=model)
    eng.apply_placement(placements(size * slots_per_rank, seed=size)[0])  # replicas with uneven window shares
    prompts = (PROMPTS * 2)[rank::size]
    ids = [eng.add_request(p, SamplingParams(max_tokens=NUM_TOKENS)) for p in prompts]
    tokens, logits, steps = {i: [] for i in ids}, None, []
    while True:
        outputs, st = eng.step()
        if logits is None and prompts:
            logits = eng.runner.last_logits.clone()
        steps.append({name: None if getattr(st.moe, name) is None else getattr(st.moe, name).clone()
                      for name in ("slot_tokens", "split_max_tokens", "shares_max_tokens", "bound_max_tokens",
                                   "group_tokens")})
        for out in outputs:
            tokens[out.request_id] += out.new_token_ids
        if eng.is_group_idle:
            break
    return {"tokens": [tokens[i] for i in ids], "logits": logits, "steps": steps}


def split_worker(rank: int, size: int, slots_per_rank: int) -> dict:
    model = load_checkpoint(CHECKPOINT_DIR)
    return {mode: run(model, rank, size, slots_per_rank, mode) for mode in ("off", "measure", "on")}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("size,slots_per_rank", [(2, 20), (4, 10)])
def test_split_changes_which_replica_not_the_output(size, slots_per_rank):
    results = run_group(split_worker, size, (slots_per_rank,), timeout=200)
    for r in results:
        off, on = r["off"], r["on"]
        assert on["tokens"] == off["tokens"] == r["measure"]["tokens"]
        torch.testing.assert_close(on["logits"], off["logits"], rtol=0, atol=1e-5)
        assert all(step["split_max_tokens"] is None for step in off["steps"])
    num_steps = len(results[0]["on"]["steps"])
    assert all(len(r["on"]["steps"]) == num_steps for r in results)
    recovered = 0
    for i in range(num_steps):
        per_rank = torch.stack([r["on"]["steps"][i]["slot_tokens"].sum(1) for r in results])  # [W, L] rows computed
        step = results[0]["on"]["steps"][i]
        for r in results:  # every rank computed the same numbers from the same gathered counts
            assert torch.equal(r["on"]["steps"][i]["split_max_tokens"], step["split_max_tokens"])
        assert torch.equal(per_rank.amax(0), step["split_max_tokens"])  # measured straggler == the split's
        assert torch.equal(per_rank.sum(0), step["group_tokens"])
        assert (step["split_max_tokens"] <= step["shares_max_tokens"]).all()
        assert (step["bound_max_tokens"] <= step["split_max_tokens"] + 1e-9).all()
        recovered += int((step["shares_max_tokens"] - step["split_max_tokens"]).sum())
    assert recovered > 0  # uneven window shares on real counts: the split lightened some straggler
