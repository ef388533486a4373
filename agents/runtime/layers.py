import torch
import torch.nn.functional as F
from torch import Tensor, nn

from agents.runtime.kv_cache import AttnBatch


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Rotary(nn.Module):
    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)  # [P, Dh/2]
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        # x: [..., H, Dh] with leading dims matching positions
        cos, sin = self.cos[positions].unsqueeze(-2), self.sin[positions].unsqueeze(-2)  # [..., 1, Dh/2]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int, rotary: Rotary, cache_index: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.cache_index = cache_index
        self.rotary = rotary
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, positions: Tensor, batch: AttnBatch | None) -> Tensor:
        q, k, v = self.wqkv(x).unflatten(-1, (3, self.num_heads, self.head_dim)).unbind(-3)  # [..., H, Dh]
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        if batch is None:  # training: x is [B, S, D]
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            return self.wo(out.transpose(1, 2).flatten(-2))
        return self.wo(self.paged(q, k, v, positions, batch).flatten(-2))

    def paged(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, batch: AttnBatch) -> Tensor:
        k_cache, v_cache = batch.kv_cache[self.cache_index]  # [num_kv_slots, H, Dh] each
        if q.shape[0] == 0:
            return q
        k_cache.index_copy_(0, batch.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, batch.slot_mapping, v.to(v_cache.dtype))
        keys, values = k_cache[batch.key_slots], v_cache[batch.key_slots]  # [B, C, H, Dh]
        num_seqs, max_context = batch.key_slots.shape
        q_pad = q.new_zeros(num_seqs, batch.max_query_len, self.num_heads, self.head_dim)  # [B, Q, H, Dh]
        q_pad[batch.seq_index, batch.query_offset] = q
        q_pos = torch.zeros(num_seqs, batch.max_query_len, dtype=torch.int64, device=q.device)  # [B, Q]
        q_pos[batch.seq_index, batch.query_offset] = positions
        key_pos = torch.arange(max_context, device=q.device)  # [C]
        mask = (key_pos <= q_pos[:, :, None]) & (key_pos < batch.context_lens[:, None, None])  # [B, Q, C]
        out = F.scaled_dot_product_attention(
            q_pad.transpose(1, 2),
            keys.transpose(1, 2).to(q.dtype),
            values.transpose(1, 2).to(q.dtype),
            attn_mask=mask[:, None],
        )  # [B, H, Q, Dh]
        return out.transpose(1, 2)[batch.seq_index, batch.query_offset]  # [T, H, Dh]


class SwiGLU(nn.Module):
    def __init__(self, dim: int, inter: int):
        super().__init__()
        self.w13 = nn.Linear(dim, 2 * inter, bias=False)  # [gate; up]
        self.w2 = nn.Linear(inter, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)
