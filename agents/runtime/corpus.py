"""Text that ships with Python: stdlib sources (code) and the pydoc topic pages (prose)."""

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

VAL_EVERY = 20  # every 20th file or topic is held out


@dataclass(slots=True)
class Corpus:
    train_code: Tensor  # [n] uint8 bytes
    train_prose: Tensor
    val_code: Tensor
    val_prose: Tensor


def _as_bytes(texts: list[str]) -> Tensor:
    data = "\n\n".join(texts).encode("utf-8")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def load_corpus() -> Corpus:
    from pydoc_data.topics import topics

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("*.py"))]
    prose = [topics[k] for k in sorted(topics)]

    def split(texts):
        return [t for i, t in enumerate(texts) if i % VAL_EVERY], texts[::VAL_EVERY]

    (tc, vc), (tp, vp) = split(code), split(prose)
    return Corpus(_as_bytes(tc), _as_bytes(tp), _as_bytes(vc), _as_bytes(vp))


def sample_batch(data: Tensor, batch_size: int, seq_len: int, generator: torch.Generator) -> Tensor:
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=generator)
    return torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()]).long()  # [B, S + 1]


def windows(data: Tensor, seq_len: int, max_tokens: int) -> Tensor:
    n = min(len(data) - 1, max_tokens) // seq_len
    idx = torch.arange(n)[:, None] * seq_len + torch.arange(seq_len + 1)  # [n, S + 1], overlapping by 1
    return data[idx].long()
