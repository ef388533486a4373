"""The load generator's prompts stay within the model's context however the bounds are set: a prefix and
max_tokens that leave no room shrink the text to one character, never to a negative length (which sliced
the text backwards into prompts of a hundred kilobytes, refused by the workers as past max_seq_len)."""

from __future__ import annotations

import pytest

from agents.loadgen.main import CHAT_OVERHEAD_BYTES, SYSTEM_PREFIXES, Workload


@pytest.mark.parametrize("max_tokens", [32, 160, 400])
def test_prompts_stay_within_the_context_or_shrink_to_one_character(max_tokens):
    context, max_chars = 256, 200
    workload = Workload(seed=3, period_seconds=120.0, min_chars=40, max_chars=max_chars, max_context_bytes=context,
                        max_tokens=max_tokens)
    lengths = {"code": [], "prose": []}
    for _ in range(3000):
        kind, prompt = workload.prompt()
        prefix = next(p for p in SYSTEM_PREFIXES[kind] if prompt.startswith(p))
        room = min(max_chars, context - max_tokens - CHAT_OVERHEAD_BYTES - len(prefix))
        text = prompt[len(prefix):]
        assert len(text.encode()) <= max(1, room), (kind, len(prompt))  # non-ASCII characters are dropped
        lengths[kind].append(len(prompt) + max_tokens + CHAT_OVERHEAD_BYTES)
    if max_tokens == 32:  # the bound can be met: it is
        assert max(lengths["code"] + lengths["prose"]) <= context
