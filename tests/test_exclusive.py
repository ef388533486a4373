"""A test marked `exclusive` runs with no other test beside it, even on two xdist workers, and the others still
run side by side; the wait for the lock is not in a test's timeout (tests/support/exclusive.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

FOUR_TESTS = '''
import json, os, time
import pytest

def record(name):
    start = time.monotonic()
    time.sleep(1.5)
    with open(os.environ["SPANS"], "a") as out:
        out.write(json.dumps([name, start, time.monotonic()]) + "\\n")

@pytest.mark.exclusive
def test_alone():
    record("alone")

@pytest.mark.parametrize("i", range(3))
def test_shared(i):
    record(f"shared{i}")
'''


def test_an_exclusive_test_never_overlaps_another_and_the_rest_do(pytester: pytest.Pytester, tmp_path):
    pytester.makeini("[pytest]\nmarkers =\n    exclusive: alone\n")
    pytester.makepyfile(test_four=FOUR_TESTS)
    spans = tmp_path / "spans"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        patch.setenv("SPANS", str(spans))
        patch.setenv("MOECTL_EXCLUSIVE_DIR", str(tmp_path))  # apart from this run's: this test holds its lock
        result = pytester.runpytest_subprocess("-p", "support.exclusive", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=4)
    rows = [json.loads(line) for line in spans.read_text().splitlines()]
    (_, alone_start, alone_end), = [r for r in rows if r[0] == "alone"]
    shared = [r for r in rows if r[0] != "alone"]
    assert all(end <= alone_start or start >= alone_end for _, start, end in shared), rows
    assert any(a[1] < b[2] and b[1] < a[2] for a in shared for b in shared if a is not b), rows  # side by side


TWO_EXCLUSIVE = '''
import json, os, time
import pytest

@pytest.mark.exclusive
@pytest.mark.timeout(2.5)  # its own 1.5 s, not the 1.5 s it may wait for the other
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    start = time.monotonic()
    time.sleep(1.5)
    with open(os.environ["SPANS"], "a") as out:
        out.write(json.dumps([i, start, time.monotonic()]) + "\\n")
'''


def test_the_wait_for_an_exclusive_test_is_not_in_the_timeout(pytester: pytest.Pytester, tmp_path):
    pytester.makeini("[pytest]\nmarkers =\n    exclusive: alone\n")
    pytester.makepyfile(test_two=TWO_EXCLUSIVE)
    spans = tmp_path / "spans"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        patch.setenv("SPANS", str(spans))
        patch.setenv("MOECTL_EXCLUSIVE_DIR", str(tmp_path))  # apart from this run's: this test holds its lock
        result = pytester.runpytest_subprocess("-p", "support.exclusive", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=2)
    (_, start_a, end_a), (_, start_b, end_b) = sorted(json.loads(line) for line in spans.read_text().splitlines())
    assert end_a <= start_b or end_b <= start_a  # one after the other, so one of them waited 1.5 s
