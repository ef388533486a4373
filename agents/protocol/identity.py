"""Who reports and about what: a rank's place in a deployment, and the MoE shape its counts are about."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from agents.protocol.wire import NAME_PATTERN, PRINTABLE, _Frozen


class Role(StrEnum):
    prefill = "prefill"
    decode = "decode"
    unified = "unified"


class ModelShape(_Frozen):
    """The MoE shape the placement is about: counts per MoE layer, not per model."""

    name: str = Field(min_length=1, max_length=128, pattern=PRINTABLE)
    num_layers: int = Field(ge=1, le=1024, description="MoE layers")
    num_experts: int = Field(ge=1, le=4096, description="routed logical experts per MoE layer")
    num_groups: int = Field(ge=1, le=4096, description="expert groups for group-limited routing")
    top_k: int = Field(ge=1, le=4096, description="routed experts per token")
    topk_group: int | None = Field(default=None, ge=1, le=4096,
                                   description="the model's own group limit (groups per token); None: none")

    @model_validator(mode="after")
    def _check(self) -> ModelShape:
        if self.num_experts % self.num_groups:
            raise ValueError(f"num_experts {self.num_experts} is not a multiple of num_groups {self.num_groups}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.topk_group is not None and self.topk_group > self.num_groups:
            raise ValueError(f"topk_group {self.topk_group} exceeds num_groups {self.num_groups}")
        return self


class Identity(_Frozen):
    """Who reports: one rank of one EP group (an instance) of a deployment's pool (its role)."""

    deployment: str = Field(pattern=NAME_PATTERN)
    instance: str = Field(min_length=1, max_length=128, pattern=PRINTABLE)
    role: Role
    rank: int = Field(ge=0)
    ep_size: int = Field(ge=1, le=4096)
    slots_per_rank: int = Field(ge=1, le=4096)
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    node: str = Field(default="", max_length=256, pattern=PRINTABLE)
    gpu_uuid: str = Field(default="", max_length=128, pattern=PRINTABLE)

    @model_validator(mode="after")
    def _check(self) -> Identity:
        if self.rank >= self.ep_size:
            raise ValueError(f"rank {self.rank} is outside an EP group of size {self.ep_size}")
        return self
