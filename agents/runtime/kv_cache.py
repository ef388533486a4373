from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(slots=True)
class AttnBatch:
    kv_cache: Tensor  # [num_attn_layers, 2, num_kv_slots, H, Dh]
    slot_mapping: Tensor  # [T] kv slot each new token writes
    seq_index: Tensor  # [T] row of the token's sequence in this batch
    query_offset: Tensor  # [T] position of the token within its sequence's query
    key_slots: Tensor  # [B, C] kv slots of each sequence's context, padded with 0
    context_lens: Tensor  # [B] valid keys per sequence after this step's writes
    max_query_len: int

    @property
    def num_seqs(self) -> int:
        return self.key_slots.shape[0]


def allocate_kv_cache(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_heads: int,
    head_dim: int,
    device,
    dtype=torch.float32,
) -> Tensor:
    return torch.zeros(
        num_layers, 2, num_blocks * block_size, num_heads, head_dim, device=device, dtype=dtype
    )


def build_attn_batch(
    kv_cache: Tensor,
    block_tables: list[list[int]],
    start_positions: list[int],
    query_lens: list[int],
    block_size: int,
    device,
) -> tuple[AttnBatch, Tensor]:
    seq_index, query_offset, positions, slot_mapping = [], [], [], []
    for i, (table, start, n) in enumerate(zip(block_tables, start_positions, query_lens, strict=True)):
        for j in range(n):
            pos = start + j
            seq_index.append(i)
            query_offset.append(j)
            positions.append(pos)
            slot_mapping.append(table[pos // block_size] * block_size + pos % block_size)
    context_lens = [start + n for start, n in zip(start_positions, query_lens, strict=True)]
    max_context = max(context_lens, default=0)
    key_slots = torch.zeros(len(block_tables), max_context, dtype=torch.int64)
    for i, (table, ctx) in enumerate(zip(block_tables, context_lens, strict=True)):
        pos = torch.arange(ctx)
        key_slots[i, :ctx] = (
            torch.tensor(table, dtype=torch.int64)[pos // block_size] * block_size + pos % block_size
        )

    def as_tensor(values):
        return torch.tensor(values, dtype=torch.int64, device=device)

    batch = AttnBatch(
        kv_cache=kv_cache,
        slot_mapping=as_tensor(slot_mapping),
        seq_index=as_tensor(seq_index),
        query_offset=as_tensor(query_offset),
        key_slots=key_slots.to(device),
        context_lens=as_tensor(context_lens),
        max_query_len=max(query_lens, default=0),
    )
    return batch, as_tensor(positions)
