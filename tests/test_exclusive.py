"""A test marked `exclusive` runs with no other test beside it, even on two xdist workers, and the others still
run side by side; the wait for the lock is not in a test's timeout; two test runs' rank-process groups never run
at once (tests/support/exclusive.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

def run_on_two_workers(pytester: pytest.Pytester, tmp_path: Path, source: str, *args: str):
    """`source` as the test module of a pytest run of its own on two workers, with support.exclusive loaded and
    locking apart from this run's (whose lock this test holds). Returns its result and the file the module
    writes what it saw to (named in $RECORD)."""
    pytester.makeini("[pytest]\nmarkers =\n    exclusive: alone\n")
    pytester.makepyfile(test_module=source)
    record = tmp_path / "record"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        patch.setenv("RECORD", str(record))
        patch.setenv("MOECTL_EXCLUSIVE_DIR", str(tmp_path))
        result = pytester.runpytest_subprocess("-p", "support.exclusive", "-p", "no:cacheprovider", "-n", "2", *args)
    return result, record

FOUR_TESTS = '''
import json, os, time
import pytest

def record(name):
    start = time.monotonic()
    time.sleep(1.5)
    with open(os.environ["RECORD"], "a") as out:
        out.write(json.dumps([name, start, time.monotonic()]) + "\\n")

@pytest.mark.exclusive
def test_alone():
    record("alone")

@pytest.mark.parametrize("i", range(3))
def test_shared(i):
    record(f"shared{i}")
'''


def test_an_exclusive_test_never_overlaps_another_and_the_rest_do(pytester: pytest.Pytester, tmp_path):
    result, spans = run_on_two_workers(pytester, tmp_path, FOUR_TESTS)
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
    with open(os.environ["RECORD"], "a") as out:
        out.write(json.dumps([i, start, time.monotonic()]) + "\\n")
'''


def test_the_wait_for_an_exclusive_test_is_not_in_the_timeout(pytester: pytest.Pytester, tmp_path):
    result, spans = run_on_two_workers(pytester, tmp_path, TWO_EXCLUSIVE)
    result.assert_outcomes(passed=2)
    (_, start_a, end_a), (_, start_b, end_b) = sorted(json.loads(line) for line in spans.read_text().splitlines())
    assert end_a <= start_b or end_b <= start_a  # one after the other, so one of them waited 1.5 s


RANK_AND_PLAIN = '''
import json, os, time
from support.processes import RANK_PROCESSES

def record(name):
    start = time.monotonic()
    time.sleep(1.5)
    with open(os.environ["SPANS"], "a") as out:
        out.write(json.dumps([os.environ["RUN"] + name, start, time.monotonic()]) + "\\n")

@RANK_PROCESSES
def test_ranks():
    record("ranks")

def test_plain():
    record("plain")
'''


def test_two_runs_on_one_machine_never_run_their_rank_groups_at_once(pytester: pytest.Pytester, tmp_path):
    pytester.makeini("[pytest]\nmarkers =\n    exclusive: alone\n")
    pytester.makepyfile(test_ranks=RANK_AND_PLAIN)
    spans = tmp_path / "spans"
    environ = {**os.environ, "SPANS": str(spans), "MOECTL_EXCLUSIVE_DIR": str(tmp_path),
               "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "pytest", "-p", "support.exclusive", "-p", "no:cacheprovider", "-n", "2", "-q"]
    runs = [subprocess.Popen(command, cwd=pytester.path, env={**environ, "RUN": run}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for run in ("a", "b")]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    rows = [json.loads(line) for line in spans.read_text().splitlines()]
    (_, start_a, end_a), (_, start_b, end_b) = sorted(r for r in rows if r[0].endswith("ranks"))
    assert end_a <= start_b or end_b <= start_a, rows  # the two runs' rank groups one after the other
    plain = [r for r in rows if r[0].endswith("plain")]
    ranks = [(start_a, end_a), (start_b, end_b)]
    assert any(p[1] < end and start < p[2] for p in plain for start, end in ranks), rows  # the rest run beside them


RANK_GROUP_ON_ONE_WORKER = '''
import os, time
import pytest
from support.processes import RANK_PROCESSES

@RANK_PROCESSES
@pytest.mark.parametrize("i", range(3))
def test_ranks(i):
    time.sleep(0.5)
    with open(os.environ["RECORD"], "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(3))
def test_plain(i):
    time.sleep(0.5)
'''


def test_the_rank_group_runs_on_one_worker(pytester: pytest.Pytester, tmp_path):
    """`make test`'s `--dist loadgroup` hands the rank-process tests to one worker: spread over two, each waits
    for the rank lock the other holds, and its worker idles (pytest 9.2 made pytest-xdist 3.8 drop the groups)."""
    result, workers = run_on_two_workers(pytester, tmp_path, RANK_GROUP_ON_ONE_WORKER, "--dist", "loadgroup")
    result.assert_outcomes(passed=6)
    ran_on = workers.read_text().split()
    assert len(ran_on) == 3 and len(set(ran_on)) == 1, ran_on
