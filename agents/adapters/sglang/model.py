"""The MoE shape of a DeepSeek-style model as SGLang lays it out: its rows are every hidden layer, ours MoE ones.

SGLang's expert-location tensors (the recorder's `logical_count`, the loader's `physical_to_logical_map`) have one
row per hidden layer, dense ones included (DeepSeek-V3: 61 rows, the first 3 dense, their rows zero in a dump).
The placement and load of moectl have one per MoE layer (58). `EngineModel` keeps both and the map between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.adapters.errors import EngineFormatError
from agents.protocol import ModelShape


@dataclass(frozen=True)
class EngineModel:
    """shape: the MoE shape moectl plans for. num_hidden_layers: SGLang's rows. moe_layer_ids: [shape.num_layers]
    the hidden layer of each MoE layer, ascending."""

    shape: ModelShape
    num_hidden_layers: int
    moe_layer_ids: tuple[int, ...]


def deepseek_model(config: dict, *, name: str, engine: str = "sglang", version: str = "") -> EngineModel:
    """config: a Hugging Face `config.json` of a DeepSeek-V2/V3-style model (n_routed_experts, num_hidden_layers,
    first_k_dense_replace, moe_layer_freq, n_group, topk_group, num_experts_per_tok).

    Raises EngineFormatError naming the missing or inconsistent field.
    """
    def need(key: str) -> int:
        value = config.get(key)
        if not isinstance(value, int) or value < 0:
            raise EngineFormatError(engine, version, f"config.json {key}", f"must be a non-negative integer, got "
                                    f"{value!r}")
        return value

    num_hidden = need("num_hidden_layers")
    first_dense = int(config.get("first_k_dense_replace", 0) or 0)
    freq = int(config.get("moe_layer_freq", 1) or 1)
    moe_ids = tuple(i for i in range(first_dense, num_hidden) if i % freq == 0)
    if not moe_ids:
        raise EngineFormatError(engine, version, "config.json first_k_dense_replace",
                                f"leaves no MoE layer in {num_hidden} hidden layers")
    num_groups = int(config.get("n_group") or 1)
    topk_group = config.get("topk_group")
    shape = ModelShape(name=name, num_layers=len(moe_ids), num_experts=need("n_routed_experts"),
                       num_groups=num_groups, top_k=need("num_experts_per_tok"),
                       topk_group=int(topk_group) if topk_group and num_groups > 1 else None)
    return EngineModel(shape, num_hidden, moe_ids)
