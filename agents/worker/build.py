"""Builds a worker rank's engine: the bundled runtime (trained checkpoint, or seeded random weights when
none is shipped yet) or the simulated engine, and the model shape the controller places experts for."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from agents.protocol import ModelShape
from agents.runtime.config import CHECKPOINT_DIR, EngineConfig, ModelConfig
from agents.runtime.ep import EPGroup
from agents.runtime.model import Transformer, load_checkpoint
from agents.worker.engine import ServingEngine

log = logging.getLogger("moectl.worker")


@dataclass
class BuiltEngine:
    engine: ServingEngine
    model: ModelShape
    runtime: str
    gpu_uuid: str = ""
    max_batched_tokens: int | None = None


def load_model(checkpoint: str, seed: int = 0) -> tuple[Transformer, str]:
    path = Path(checkpoint or CHECKPOINT_DIR)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return load_checkpoint(path), f"moectl-tiny@{path.name}"
    log.warning("no trained checkpoint in %s: serving seeded random weights (routing skew is not real)", path)
    torch.manual_seed(seed)  # every rank builds the same weights
    return Transformer(ModelConfig()), "moectl-tiny-untrained"


def build_engine(args: argparse.Namespace, group: EPGroup) -> BuiltEngine:
    if args.sim:
        from agents.sim.engine import SimConfig, SimEngine

        cfg = SimConfig(ep_size=args.ep_size, ep_rank=args.rank, slots_per_rank=args.slots_per_rank,
                        gpus_per_node=args.gpus_per_node, num_speculative_tokens=args.num_speculative_tokens)
        shape = ModelShape(name="sim-tiny", num_layers=cfg.num_layers, num_experts=cfg.num_experts,
                           num_groups=cfg.num_groups, top_k=cfg.top_k, topk_group=cfg.topk_group)
        return BuiltEngine(SimEngine(cfg, group), shape, "moectl-sim")

    from agents.runtime.engine import Engine

    model, name = load_model(args.checkpoint)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = EngineConfig(device=device, ep_size=args.ep_size, ep_rank=args.rank, slots_per_rank=args.slots_per_rank,
                       gpus_per_node=args.gpus_per_node, num_speculative_tokens=args.num_speculative_tokens,
                       num_kv_blocks=args.num_kv_blocks, max_num_seqs=args.max_num_seqs,
                       dispatch_split=getattr(args, "dispatch_split", "off"))
    mc = model.cfg
    shape = ModelShape(name=name, num_layers=mc.num_moe_layers, num_experts=mc.num_experts,
                       num_groups=mc.num_groups, top_k=mc.top_k, topk_group=mc.topk_group)
    gpu_uuid = str(torch.cuda.get_device_properties(0).uuid) if device == "cuda" else ""
    return BuiltEngine(Engine(cfg, group, model), shape, "moectl-runtime", gpu_uuid, cfg.max_num_batched_tokens)
