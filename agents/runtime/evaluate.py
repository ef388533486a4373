"""Held-out quality and routing numbers of a checkpoint: bits/byte, MTP acceptance, expert-load skew."""

import argparse
import json
import math
from functools import partial

import torch
import torch.nn.functional as F

from agents.runtime import moe_ops
from agents.runtime.config import CHECKPOINT_DIR
from agents.runtime.corpus import load_corpus, windows
from agents.runtime.model import Transformer, load_checkpoint


@torch.inference_mode()
def evaluate_text(
    model: Transformer, data: torch.Tensor, seq_len: int = 256, max_tokens: int = 65536
) -> dict:
    batches = windows(data, seq_len, max_tokens).split(16)
    cfg = model.cfg
    loads = torch.zeros(cfg.num_moe_layers, cfg.num_experts, dtype=torch.int64)
    nll = mtp_nll = hits = agree = n = n_mtp = 0.0
    recall = torch.zeros(2, cfg.num_groups)  # [kept, total] for topk_group = 1..G

    def count_recall(moe, _module, _inp, gate_logits):
        scores = torch.sigmoid(gate_logits.float()).reshape(-1, cfg.num_experts)  # [T, E]
        for g in range(1, cfg.num_groups + 1):
            _, ids = moe_ops.grouped_topk(scores, moe.bias, cfg.num_groups, g, cfg.top_k, cfg.route_scale)
            recall[0, g - 1] += moe_ops.routing_recall(scores, moe.bias, ids)
            recall[1, g - 1] += ids.numel()

    hooks = [m.gate.register_forward_hook(partial(count_recall, m)) for m in model.moes]
    for tokens in batches:  # [B, S + 1]
        logits, mtp_logits = model(tokens)
        for moe in model.moes:
            loads[moe.moe_index] += moe.last_load
        nll += F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum").item()
        n += tokens[:, 1:].numel()
        if mtp_logits is not None:
            draft = mtp_logits.argmax(-1)  # [B, S - 1] guesses for t_{i+2}
            mtp_nll += F.cross_entropy(
                mtp_logits.flatten(0, 1), tokens[:, 2:].flatten(), reduction="sum"
            ).item()
            hits += (draft == tokens[:, 2:]).sum().item()  # teacher-forced: matches the text
            agree += (draft == logits[:, 1:].argmax(-1)).sum().item()  # what greedy verification would accept
            n_mtp += draft.numel()
    for hook in hooks:
        hook.remove()
    mean = loads.float().mean(1)
    return {
        "bits_per_byte": nll / n / math.log(2),
        "mtp_bits_per_byte": mtp_nll / max(n_mtp, 1) / math.log(2),
        "mtp_acceptance_teacher_forced": hits / max(n_mtp, 1),
        "mtp_acceptance_greedy": agree / max(n_mtp, 1),
        "max_to_mean_load": (loads.float().max(1).values / mean).tolist(),
        "routing_recall_by_topk_group": (recall[0] / recall[1].clamp(min=1)).tolist(),
        "expert_load": loads.tolist(),
    }


def load_shift(a: list[list[int]], b: list[list[int]]) -> list[float]:
    pa, pb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    pa, pb = pa / pa.sum(1, keepdim=True), pb / pb.sum(1, keepdim=True)
    return (0.5 * (pa - pb).abs().sum(1)).tolist()  # total variation distance per layer, 0..1


def evaluate(model: Transformer, max_tokens: int = 65536) -> dict:
    corpus = load_corpus()
    model.eval()
    code = evaluate_text(model, corpus.val_code, max_tokens=max_tokens)
    prose = evaluate_text(model, corpus.val_prose, max_tokens=max_tokens)
    model.train()
    return {
        "code": code,
        "prose": prose,
        "code_vs_prose_load_shift": load_shift(code["expert_load"], prose["expert_load"]),
    }


def summary(result: dict) -> str:
    lines = [
        "| text | bits/byte | MTP bits/byte | MTP acc. (text) | MTP acc. (greedy) | max/mean load |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("code", "prose"):
        r = result[name]
        skew = " ".join(f"{x:.2f}" for x in r["max_to_mean_load"])
        lines.append(
            f"| {name} | {r['bits_per_byte']:.3f} | {r['mtp_bits_per_byte']:.3f} | "
            f"{r['mtp_acceptance_teacher_forced']:.3f} | {r['mtp_acceptance_greedy']:.3f} | {skew} |"
        )
    shift = " ".join(f"{x:.2f}" for x in result["code_vs_prose_load_shift"])
    for name in ("code", "prose"):
        rec = " ".join(f"{x:.3f}" for x in result[name]["routing_recall_by_topk_group"])
        lines.append(f"\nRouting recall on {name}, topk_group = 1..G: {rec}")
    lines.append(f"\nCode-vs-prose expert-load shift (total variation per MoE layer): {shift}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", default=str(CHECKPOINT_DIR))
    parser.add_argument("--max-tokens", type=int, default=65536, help="held-out bytes per kind of text")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = load_checkpoint(args.checkpoint)
    result = evaluate(model, args.max_tokens)
    print(json.dumps(result) if args.json else summary(result))


if __name__ == "__main__":
    main()
