"""The router window's prompt-length buckets: optional, fixed, and adding up to the arrivals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.serving_windows import prompt_buckets

from agents.protocol import NUM_PROMPT_BUCKETS, PROMPT_BUCKET_TOKENS, RouterWindow, prompt_bucket


def window(**fields) -> RouterWindow:
    return RouterWindow(deployment="tiny", router="router-0", window_start=1.0e9, window_seconds=10.0, **fields)



def test_a_prompt_counts_in_the_bucket_of_the_first_bound_it_does_not_pass():
    assert PROMPT_BUCKET_TOKENS[0] == 64 and PROMPT_BUCKET_TOKENS[-1] == 2**20
    assert [prompt_bucket(n) for n in (0, 1, 64, 65, 128, 129, 512, 513)] == [0, 0, 0, 1, 1, 2, 3, 4]
    assert prompt_bucket(2**20) == NUM_PROMPT_BUCKETS - 2 and prompt_bucket(2**20 + 1) == NUM_PROMPT_BUCKETS - 1


def test_buckets_are_optional_so_older_routers_still_post():
    assert window(num_arrivals=3, input_tokens=900).prompt_buckets is None
    counted = window(num_arrivals=3, input_tokens=900, prompt_buckets=prompt_buckets(b4=2, b8=1))
    assert counted.prompt_buckets[8] == 1


@pytest.mark.parametrize(("counts", "problem"), [
    (prompt_buckets(b4=2), "sum to 2, not num_arrivals 3"),
    (prompt_buckets(b4=4, b5=-1), "within 0.."),
    ((3,), "at least 16 items"),
    ((0,) * (NUM_PROMPT_BUCKETS + 1) + (3,), "at most 16 items"),
])
def test_buckets_that_do_not_add_up_to_the_arrivals_are_refused(counts, problem):
    with pytest.raises(ValidationError, match="prompt_buckets") as error:
        window(num_arrivals=3, input_tokens=900, prompt_buckets=counts)
    assert problem in str(error.value)
