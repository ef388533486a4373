import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from agents.runtime.config import ModelConfig
from agents.runtime.kv_cache import AttnBatch
from agents.runtime.layers import Attention, RMSNorm, Rotary, SwiGLU
from agents.runtime.moe import MoE
from agents.runtime.mtp import MTP


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: Rotary, cache_index: int, moe_index: int | None):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg.dim, cfg.num_heads, rotary, cache_index)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = SwiGLU(cfg.dim, cfg.dense_inter) if moe_index is None else MoE(cfg, moe_index)

    def forward(self, x: Tensor, positions: Tensor, batch: AttnBatch | None) -> Tensor:
        x = x + self.attn(self.attn_norm(x), positions, batch)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.rotary = Rotary(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(
            Block(cfg, self.rotary, i, None if i < cfg.num_dense_layers else i - cfg.num_dense_layers)
            for i in range(cfg.num_layers)
        )
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        num_trunk_moes = cfg.num_layers - cfg.num_dense_layers
        self.mtp = nn.ModuleList(
            MTP(cfg, Block(cfg, self.rotary, cfg.num_layers + i, num_trunk_moes + i))
            for i in range(cfg.num_mtp_layers)
        )

    @property
    def moes(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]  # ordered by moe_index

    @property
    def num_attn_layers(self) -> int:
        return self.cfg.num_layers + self.cfg.num_mtp_layers

    def trunk(self, tokens: Tensor, positions: Tensor, batch: AttnBatch | None = None) -> Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, positions, batch)
        return h  # pre-norm hidden states, fed to the MTP module

    def logits(self, h: Tensor) -> Tensor:
        return self.head(self.norm(h)).float()

    def draft(
        self, h: Tensor, next_tokens: Tensor, positions: Tensor, batch: AttnBatch | None = None, depth=0
    ):
        mtp = self.mtp[depth % len(self.mtp)]
        z = mtp(h, self.embed(next_tokens), positions, batch)
        return z, self.head(mtp.norm(z)).float()  # hidden for the next depth, logits for token i + 2

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor | None]:
        # training: tokens [B, S + 1]; returns main logits [B, S, V] and MTP logits [B, S - 1, V] (for t+2)
        inp = tokens[:, :-1]
        positions = torch.arange(inp.shape[1], device=tokens.device)
        h = self.trunk(inp, positions)
        if not len(self.mtp):
            return self.logits(h), None
        _, mtp_logits = self.draft(h[:, :-1], tokens[:, 1:-1], positions[:-1])
        return self.logits(h), mtp_logits


def save_checkpoint(model: Transformer, out_dir: str | Path, meta: dict) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: (v.detach().half() if v.dim() > 1 else v.detach().float()).contiguous().cpu()
        for k, v in model.state_dict().items()
    }
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({"model": model.cfg.to_dict(), **meta}, indent=2) + "\n")


def load_checkpoint(path: str | Path, device="cpu") -> Transformer:
    path = Path(path)
    cfg = ModelConfig.load(path / "config.json")
    model = Transformer(cfg)
    state = {k: v.float() for k, v in load_file(path / "model.safetensors").items()}
    model.load_state_dict(state)
    return model.to(device).eval()
