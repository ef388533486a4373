import math

import torch
from torch import Tensor, nn

from agents.runtime import kernels
from agents.runtime.config import ModelConfig
from agents.runtime.layers import SwiGLU


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig, moe_index: int):
        super().__init__()
        self.cfg, self.moe_index = cfg, moe_index
        self.gate = nn.Linear(cfg.dim, cfg.num_experts, bias=False)
        self.register_buffer("bias", torch.zeros(cfg.num_experts))  # aux-loss-free e_score_correction_bias
        self.shared = SwiGLU(cfg.dim, cfg.shared_inter)
        self.w13 = nn.Parameter(torch.randn(cfg.num_experts, 2 * cfg.moe_inter, cfg.dim) / math.sqrt(cfg.dim))
        self.w2 = nn.Parameter(
            torch.randn(cfg.num_experts, cfg.dim, cfg.moe_inter) / math.sqrt(cfg.moe_inter)
        )
        self.ep = None  # ExpertParallel, attached by the engine; None: all experts local (training)
        self.last_load = torch.zeros(cfg.num_experts, dtype=torch.int64)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # [T, D]
        scores = torch.sigmoid(self.gate(x).float())  # [T, E]
        if self.ep is not None:
            return self.ep.forward(self, x, scores).view(shape)
        cfg, ops = self.cfg, kernels.ops_for(x)
        weights, topk_ids = ops.grouped_topk(
            scores, self.bias, cfg.num_groups, cfg.topk_group, cfg.top_k, cfg.route_scale
        )  # [T, K]
        self.last_load = ops.histogram(topk_ids, cfg.num_experts)  # [E]
        order, counts = ops.permute(topk_ids, cfg.num_experts)
        y = ops.grouped_swiglu(x[order // cfg.top_k], counts, self.w13, self.w2)  # [N, D]
        routed = ops.combine(ops.unpermute(y, order, topk_ids.numel()), weights.to(x.dtype))  # [T, D]
        return (self.shared(x) + routed).view(shape)

    @torch.no_grad()
    def update_bias(self, gamma: float) -> None:
        load = self.last_load.float()
        self.bias += gamma * torch.sign(load.mean() - load)
