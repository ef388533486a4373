import json
import subprocess
import sys

import torch
from safetensors.torch import load_file

from agents.runtime.config import CHECKPOINT_DIR
from agents.runtime.corpus import load_corpus
from agents.runtime.evaluate import evaluate_text, load_shift
from agents.runtime.model import load_checkpoint
from agents.runtime.train import parse_args, train

torch.set_num_threads(1)


def test_training_is_seeded_and_moves_the_routing_bias(tmp_path):
    argv = ["--steps", "3", "--batch-size", "4", "--seq-len", "32", "--eval-tokens", "0", "--warmup", "1"]
    train(parse_args([*argv, "--out", str(tmp_path / "a")]))
    train(parse_args([*argv, "--out", str(tmp_path / "b")]))
    train(parse_args([*argv, "--out", str(tmp_path / "c"), "--seed", "1"]))
    a, b, c = (load_file(tmp_path / x / "model.safetensors") for x in "abc")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    biases = [v for k, v in a.items() if k.endswith("ffn.bias")]
    assert len(biases) == 4 and all(b.abs().sum() > 0 for b in biases)
    meta = json.loads((tmp_path / "a" / "config.json").read_text())
    assert meta["train"]["steps_done"] == 3 and meta["model"]["num_experts"] == 32


def test_train_cli_has_help():
    out = subprocess.run(
        [sys.executable, "-m", "agents.runtime.train", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--minutes" in out.stdout and "--out" in out.stdout


def test_shipped_checkpoint_learned_text_and_routes_with_skew():
    assert (CHECKPOINT_DIR / "model.safetensors").stat().st_size + (
        CHECKPOINT_DIR / "config.json"
    ).stat().st_size
    assert sum(p.stat().st_size for p in CHECKPOINT_DIR.iterdir()) <= 10 * 2**20
    model = load_checkpoint(CHECKPOINT_DIR)
    corpus = load_corpus()
    code = evaluate_text(model, corpus.val_code, max_tokens=8192)
    prose = evaluate_text(model, corpus.val_prose, max_tokens=8192)
    for r in (code, prose):
        assert r["bits_per_byte"] < 3.5  # a unigram model needs ~4.5, uniform 8
        assert r["mtp_acceptance_greedy"] >= 0.5
        assert max(r["max_to_mean_load"]) > 1.5
    assert max(load_shift(code["expert_load"], prose["expert_load"])) > 0.05
