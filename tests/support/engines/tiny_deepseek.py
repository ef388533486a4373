"""A tiny DeepSeek-V3 checkpoint and its tokenizer, written from code (nothing downloaded), for the live vLLM tests.

Runs in the vLLM venv (tests/support/engines/vllm_cpu.py: torch, safetensors, tokenizers). The shape is the smallest
vLLM's CPU backend serves: its MLA decode kernel compiles only for a 576-wide latent head, so `kv_lora_rank` 512 and
`qk_rope_head_dim` 64; the rest is tiny (hidden 256, 4 layers, the first dense, 16 routed experts in 4 groups, top-4
of the top-2 groups, `noaux_tc` sigmoid routing, one shared expert). Weights are random (seeded), in DeepSeek's own
checkpoint layout (one tensor per expert projection). The bundled runtime's checkpoint (agents/runtime/) is not
converted: its attention is not MLA, so it would need kv_lora_rank 512 projections it never learnt; instead the
routers' `e_score_correction_bias` ramps over the experts and the gate rows are scaled apart, so routing is skewed
(a heatmap with structure) while still depending on the token.

The tokenizer is a byte-level BPE of VOCAB tokens trained with `tokenizers` on this repository's own Markdown.
Usage: python tiny_deepseek.py OUT_DIR REPO_ROOT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": VOCAB,
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 4,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "q_lora_rank": None, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64, "v_head_dim": 64,
    "num_nextn_predict_layers": 0, "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
    "initializer_range": 0.02, "use_cache": True,
}
SPECIAL = ["<|bos|>", "<|eos|>"]


def weights(seed: int = 0) -> dict:
    """name -> bf16 tensor, DeepSeek-V3's checkpoint names."""
    import torch

    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    qk_head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]

    def rand(*shape: int, scale: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    out = {"model.embed_tokens.weight": rand(VOCAB, hidden, scale=1.0), "model.norm.weight": torch.ones(hidden),
           "lm_head.weight": rand(VOCAB, hidden, scale=0.05)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": torch.ones(hidden),
                p + "post_attention_layernorm.weight": torch.ones(hidden),
                p + "self_attn.q_proj.weight": rand(heads * qk_head, hidden),
                p + "self_attn.kv_a_proj_with_mqa.weight": rand(c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden),
                p + "self_attn.kv_a_layernorm.weight": torch.ones(c["kv_lora_rank"]),
                p + "self_attn.kv_b_proj.weight": rand(heads * (c["qk_nope_head_dim"] + c["v_head_dim"]),
                                                       c["kv_lora_rank"]),
                p + "self_attn.o_proj.weight": rand(hidden, heads * c["v_head_dim"])}
        if i < c["first_k_dense_replace"]:
            inter = c["intermediate_size"]
            out |= {p + "mlp.gate_proj.weight": rand(inter, hidden), p + "mlp.up_proj.weight": rand(inter, hidden),
                    p + "mlp.down_proj.weight": rand(hidden, inter)}
            continue
        num_experts, inter = c["n_routed_experts"], c["moe_intermediate_size"]
        # skew: gate rows of growing norm, and a bias ramp that favours low expert ids, different per layer
        row_scale = torch.linspace(0.5, 2.0, num_experts).roll(i).unsqueeze(1)
        out[p + "mlp.gate.weight"] = rand(num_experts, hidden, scale=0.1) * row_scale
        out[p + "mlp.gate.e_score_correction_bias"] = torch.linspace(0.15, 0.0, num_experts).roll(3 * i).float()
        for e in range(num_experts):
            q = f"{p}mlp.experts.{e}."
            out |= {q + "gate_proj.weight": rand(inter, hidden), q + "up_proj.weight": rand(inter, hidden),
                    q + "down_proj.weight": rand(hidden, inter)}
        shared = inter * c["n_shared_experts"]
        out |= {p + "mlp.shared_experts.gate_proj.weight": rand(shared, hidden),
                p + "mlp.shared_experts.up_proj.weight": rand(shared, hidden),
                p + "mlp.shared_experts.down_proj.weight": rand(hidden, shared)}
    return {k: (v.float() if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16)).contiguous()
            for k, v in out.items()}


def train_tokenizer(repo: Path, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [p.read_text(errors="replace") for p in sorted(repo.glob("**/*.md")) if ".venv" not in p.parts]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL[0], "eos_token": SPECIAL[1],
        "model_max_length": 2048,
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"}))


def write(out: Path, repo: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(weights(), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    train_tokenizer(repo, out)


if __name__ == "__main__":
    write(Path(sys.argv[1]), Path(sys.argv[2]))
