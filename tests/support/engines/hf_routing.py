"""Another implementation's routing of the same tokens: transformers' DeepseekV3ForCausalLM on the tiny checkpoint,
in float32, counting the top-k its routers (DeepseekV3TopkRouter) choose. Runs in the vLLM venv (transformers is
among vLLM's requirements). Reads a JSON list of token-id sequences on stdin (each the tokens a request put through
the model: its prompt and its generated tokens but the last); writes [num_moe_layers, num_experts] counts as JSON.
Usage: python hf_routing.py MODEL_DIR < sequences.json
"""

from __future__ import annotations

import json
import sys


def main(model_dir: str) -> None:
    import torch
    from transformers import DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    config = model.config
    moe_ids = list(range(config.first_k_dense_replace, config.num_hidden_layers))
    counts = torch.zeros(len(moe_ids), config.n_routed_experts, dtype=torch.int64)

    def hook(row: int):
        def record(module, inputs, output) -> None:  # noqa: ANN001
            counts[row] += torch.bincount(output[2].reshape(-1), minlength=config.n_routed_experts)
        return record

    for row, layer in enumerate(moe_ids):
        model.model.layers[layer].mlp.gate.register_forward_hook(hook(row))
    with torch.no_grad():
        for ids in json.load(sys.stdin):
            model(torch.tensor([ids]))
    json.dump(counts.tolist(), sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
