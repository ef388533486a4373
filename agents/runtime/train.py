"""Train the bundled tiny MoE on stdlib code and pydoc prose; writes model.safetensors + config.json.

Reproducible: a fixed seed and a fixed number of steps give the same weights on the same torch build.
"""

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

from agents.runtime.config import CHECKPOINT_DIR, ModelConfig
from agents.runtime.corpus import load_corpus, sample_batch
from agents.runtime.evaluate import evaluate, summary
from agents.runtime.model import Transformer, save_checkpoint


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agents.runtime.train", description=__doc__)
    p.add_argument(
        "--out", default=str(CHECKPOINT_DIR), help="checkpoint directory (default: the shipped one)"
    )
    p.add_argument("--steps", type=int, default=600, help="optimizer steps (fixes the result)")
    p.add_argument("--minutes", type=float, default=10.0, help="wall-clock cap; stopping early is reported")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--gamma", type=float, default=1e-3, help="aux-loss-free bias update speed")
    p.add_argument("--mtp-weight", type=float, default=0.3)
    p.add_argument("--prose-share", type=float, default=0.3, help="share of batch rows drawn from prose")
    p.add_argument(
        "--eval-tokens", type=int, default=65536, help="held-out bytes per kind of text; 0 skips evaluation"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(args) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    corpus = load_corpus()
    cfg = ModelConfig()
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    num_prose = round(args.batch_size * args.prose_share)
    t0, step, loss_ema = time.perf_counter(), 0, None
    for step in range(args.steps):
        if time.perf_counter() - t0 > args.minutes * 60:
            print(f"\nstopped at the {args.minutes} minute cap after {step} steps", file=sys.stderr)
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        tokens = torch.cat(
            [
                sample_batch(corpus.train_code, args.batch_size - num_prose, args.seq_len, gen),
                sample_batch(corpus.train_prose, num_prose, args.seq_len, gen),
            ]
        )  # [B, S + 1]
        logits, mtp_logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        mtp_loss = F.cross_entropy(mtp_logits.flatten(0, 1), tokens[:, 2:].flatten())
        opt.zero_grad(set_to_none=True)
        (loss + args.mtp_weight * mtp_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for moe in model.moes:
            moe.update_bias(args.gamma)
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        elapsed = time.perf_counter() - t0
        done = (step + 1) / args.steps
        bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
        print(
            f"\r[{bar}] {step + 1}/{args.steps} loss {loss_ema:.3f} ({loss_ema / math.log(2):.2f} bits/byte) "
            f"mtp {mtp_loss.item():.3f} {tokens[:, 1:].numel() * (step + 1) / elapsed:,.0f} tok/s "
            f"eta {elapsed / done - elapsed:4.0f}s",
            end="",
            flush=True,
        )
    print()
    train_seconds = time.perf_counter() - t0
    result = evaluate(model, args.eval_tokens) if args.eval_tokens else {}
    meta = {
        "train": {k: v for k, v in vars(args).items() if k != "out"}
        | {
            "steps_done": step + 1,
            "seconds": round(train_seconds, 1),
            "torch": torch.__version__,
        },
        "eval": {
            k: {m: v for m, v in r.items() if m != "expert_load"} if isinstance(r, dict) else r
            for k, r in result.items()
        },
    }
    save_checkpoint(model, args.out, meta)
    if result:
        print(summary(result))
    print(f"wrote {args.out} after {train_seconds:.0f}s of training")
    return result


def main(argv=None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    main()
