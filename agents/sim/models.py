"""Model shapes and pool layouts the simulated fleet can run, by name (`moectl sim --model NAME`).

`deepseek-v3` is DeepSeek-V3's MoE as its serving was described: 58 MoE layers of 256 routed experts in 8
groups, top-8 with at most 4 groups per token. Prefill instances run on 32 GPUs (EP32, 9 slots per GPU: 256
experts and 32 redundant), decode instances on 320 GPUs (EP320, one expert per GPU: 256 and 64 redundant). Token
rates per GPU follow the published throughput of an H800 node (about 73.7k input tokens/s in prefill and 14.8k
output tokens/s in decode, per 8 GPUs; decode counts the MTP draft token verified beside each output token).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import ModelShape, Role


@dataclass(frozen=True)
class PoolLayout:
    """One pool of a simulated deployment: `num_instances` EP groups of `ep_size` GPUs."""

    role: Role
    ep_size: int
    slots_per_rank: int
    num_instances: int
    tokens_per_rank_second: int  # tokens one GPU's attention routes per second


@dataclass(frozen=True)
class ModelLayout:
    model: ModelShape
    pools: tuple[PoolLayout, ...]
    gpus_per_node: int = 8

    def with_instances(self, role: Role, num_instances: int) -> ModelLayout:
        pools = tuple(PoolLayout(p.role, p.ep_size, p.slots_per_rank, num_instances, p.tokens_per_rank_second)
                      if p.role == role else p for p in self.pools)
        return ModelLayout(self.model, pools, self.gpus_per_node)

    @property
    def num_gpus(self) -> int:
        return sum(p.ep_size * p.num_instances for p in self.pools)


DEEPSEEK_V3 = ModelShape(name="deepseek-v3", num_layers=58, num_experts=256, num_groups=8, top_k=8, topk_group=4)
SIM_MOE = ModelShape(name="sim-moe-64e", num_layers=8, num_experts=64, num_groups=8, top_k=6)

MODELS = {
    "deepseek-v3": ModelLayout(DEEPSEEK_V3, (
        PoolLayout(Role.prefill, ep_size=32, slots_per_rank=9, num_instances=1, tokens_per_rank_second=9_200),
        PoolLayout(Role.decode, ep_size=320, slots_per_rank=1, num_instances=1, tokens_per_rank_second=3_700),
    )),
    # the small default: a decode pool of 8 GPUs, 10 slots each (64 experts, 16 redundant)
    "sim-moe-64e": ModelLayout(SIM_MOE, (
        PoolLayout(Role.decode, ep_size=8, slots_per_rank=10, num_instances=1, tokens_per_rank_second=200),
    )),
}


def layout_for_gpus(name: str, num_gpus: int) -> ModelLayout:
    """The model's layout grown to about `num_gpus` GPUs: one prefill instance per decode instance's worth of
    GPUs left over, the rest decode instances (DeepSeek-V3: 320 -> 1 decode; 1,024 -> 3 decode + 2 prefill)."""
    layout = MODELS[name]
    prefill, decode = (next(p for p in layout.pools if p.role == role) for role in (Role.prefill, Role.decode))
    num_decode = max(1, num_gpus // decode.ep_size)
    num_prefill = (num_gpus - num_decode * decode.ep_size) // prefill.ep_size
    return layout.with_instances(Role.decode, num_decode).with_instances(Role.prefill, num_prefill)
