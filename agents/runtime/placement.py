from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, slots=True)
class EngineRoutingLimits:
    """The routing limits an engine runs, versioned and staged like a placement (agents/protocol/desired.py's
    RoutingLimits is what the controller asks for; the agent turns it into these, the same on every rank)."""

    version: int = 0
    topk_group: int | None = None  # None: the model's own topk_group
    max_tokens_per_expert: int | None = None  # per step, per routing rank; None: unlimited


@dataclass(slots=True)
class Placement:
    slot_to_expert: Tensor  # [num_moe_layers, num_slots] int64; slot s lives on rank s // slots_per_rank
    slot_share: Tensor | None = None  # [num_moe_layers, num_slots] traffic share among an expert's replicas
    version: int = 0

    def __post_init__(self):
        self.slot_to_expert = torch.as_tensor(self.slot_to_expert, dtype=torch.int64).cpu()
        if self.slot_to_expert.dim() != 2:
            raise ValueError("slot_to_expert must be [num_moe_layers, num_slots]")
        if self.slot_share is not None:
            self.slot_share = torch.as_tensor(self.slot_share, dtype=torch.float64).cpu()
            if self.slot_share.shape != self.slot_to_expert.shape or (self.slot_share < 0).any():
                raise ValueError("slot_share must be non-negative and shaped like slot_to_expert")

    @property
    def num_layers(self) -> int:
        return self.slot_to_expert.shape[0]

    @property
    def num_slots(self) -> int:
        return self.slot_to_expert.shape[1]

    @classmethod
    def default(cls, num_layers: int, num_experts: int, num_slots: int, version: int = 0) -> "Placement":
        slot_to_expert = (torch.arange(num_slots) % num_experts).repeat(num_layers, 1)  # [L, S]
        return cls(slot_to_expert, version=version)

    def validate(self, num_layers: int, num_experts: int, num_slots: int) -> None:
        if self.slot_to_expert.shape != (num_layers, num_slots):
            raise ValueError(
                f"placement must be [{num_layers}, {num_slots}], got {tuple(self.slot_to_expert.shape)}"
            )
        if self.slot_to_expert.min() < 0 or self.slot_to_expert.max() >= num_experts:
            raise ValueError("slot_to_expert holds an expert id out of range")
        for layer in range(num_layers):
            present = torch.zeros(num_experts, dtype=torch.bool)
            present[self.slot_to_expert[layer]] = True
            if not present.all():
                raise ValueError(
                    f"layer {layer}: experts {(~present).nonzero().flatten().tolist()} have no slot"
                )
        if self.slot_share is not None:
            shares = self.expert_share_sums(num_experts)
            if (shares <= 0).any():
                raise ValueError("every expert needs a positive total slot_share")

    def expert_share_sums(self, num_experts: int) -> Tensor:
        share = self.slot_share if self.slot_share is not None else torch.ones(self.slot_to_expert.shape)
        sums = torch.zeros(self.num_layers, num_experts, dtype=torch.float64)
        return sums.scatter_add_(1, self.slot_to_expert, share.to(torch.float64))  # [L, E]

    def routing_tables(self, num_experts: int) -> tuple[Tensor, Tensor]:
        num_replicas = self.expert_to_num_replicas(num_experts)  # [L, E]
        max_replicas = int(num_replicas.max())
        expert_to_slots = torch.full((self.num_layers, num_experts, max_replicas), -1, dtype=torch.int64)
        cum_share = torch.full((self.num_layers, num_experts, max_replicas), 2.0, dtype=torch.float64)
        share = self.slot_share if self.slot_share is not None else torch.ones(self.slot_to_expert.shape)
        totals = self.expert_share_sums(num_experts)
        for layer in range(self.num_layers):
            filled = [0] * num_experts
            running = [0.0] * num_experts
            for slot, expert in enumerate(self.slot_to_expert[layer].tolist()):
                r = filled[expert]
                expert_to_slots[layer, expert, r] = slot
                running[expert] += float(share[layer, slot]) / float(totals[layer, expert])
                cum_share[layer, expert, r] = running[expert]
                filled[expert] += 1
        last = num_replicas - 1  # the last replica takes whatever rounding leaves
        cum_share.scatter_(2, last[:, :, None], 2.0)
        return expert_to_slots, cum_share.float()  # [L, E, R] each

    def expert_to_num_replicas(self, num_experts: int) -> Tensor:
        counts = torch.zeros(self.num_layers, num_experts, dtype=torch.int64)
        return counts.scatter_add_(1, self.slot_to_expert, torch.ones_like(self.slot_to_expert))

    def replica_gpu_tables(self, num_experts: int, num_gpus: int) -> tuple[Tensor, Tensor, Tensor]:
        """The dispatch-time split's view of this table: (expert_to_gpus, gpu_share, gpu_slot), each [L, E, R].

        `expert_to_gpus`: each expert's distinct GPUs (ranks) in slot order, -1 padded.
        `gpu_share`: the fixed share of its tokens each takes (its slots' normalised shares summed; float64).
        `gpu_slot`: the expert's first slot on that GPU, where a split sends the GPU's quota
        (`replica_gpus` in agents/protocol/replica_split.py is the twin)."""
        slots_per_gpu = self.num_slots // num_gpus
        share = self.slot_share if self.slot_share is not None else torch.ones(self.slot_to_expert.shape)
        totals = self.expert_share_sums(num_experts)  # [L, E]
        held: list[list[dict[int, list]]] = [[{} for _ in range(num_experts)] for _ in range(self.num_layers)]
        for layer in range(self.num_layers):
            for slot, expert in enumerate(self.slot_to_expert[layer].tolist()):
                entry = held[layer][expert].setdefault(slot // slots_per_gpu, [slot, 0.0])  # dicts keep slot order
                entry[1] += float(share[layer, slot]) / float(totals[layer, expert])
        max_replicas = max(len(gpus) for row in held for gpus in row)
        shape = (self.num_layers, num_experts, max_replicas)
        expert_to_gpus, gpu_slot = torch.full(shape, -1, dtype=torch.int64), torch.full(shape, -1, dtype=torch.int64)
        gpu_share = torch.zeros(shape, dtype=torch.float64)
        for layer, row in enumerate(held):
            for expert, gpus in enumerate(row):
                for r, (gpu, (slot, fraction)) in enumerate(gpus.items()):
                    expert_to_gpus[layer, expert, r], gpu_slot[layer, expert, r] = gpu, slot
                    gpu_share[layer, expert, r] = fraction
        return expert_to_gpus, gpu_share, gpu_slot
