"""Bundled DeepSeek-style MoE runtime: model, paged KV cache, scheduler, expert parallelism, MTP."""

from agents.runtime.config import EngineConfig, ModelConfig
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.sequence import SamplingParams

__all__ = ["EngineConfig", "ModelConfig", "Placement", "EngineRoutingLimits", "SamplingParams"]
