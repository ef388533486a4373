import torch
from torch import Tensor, nn

from agents.runtime.config import ModelConfig
from agents.runtime.kv_cache import AttnBatch
from agents.runtime.layers import RMSNorm


class MTP(nn.Module):
    """DeepSeek-V3 MTP: [enorm(emb(t_{i+1})); hnorm(h_i)] -> eh_proj -> block -> t_{i+2}."""

    def __init__(self, cfg: ModelConfig, block: nn.Module):
        super().__init__()
        self.enorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)
        self.block = block
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)  # shared_head.norm; the head itself is the model's

    def forward(self, h: Tensor, next_emb: Tensor, positions: Tensor, batch: AttnBatch | None) -> Tensor:
        z = self.eh_proj(torch.cat([self.enorm(next_emb), self.hnorm(h)], dim=-1))
        return self.block(z, positions, batch)
