"""A failure whose traceback pytest cannot format (CPython 3.11's AST SystemError) is still one failed test
with its frames as plain lines, under xdist too: the worker and the rest of the run go on
(tests/support/reports.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# a plugin whose makereport fails as pytest's does when ast.parse raises SystemError
BROKEN_FORMATTING = '''
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None:
        raise SystemError("AST constructor recursion depth mismatch (before=147, after=41)")
    return report
'''

TESTS_FILE = '''
def test_fails():
    assert 1 + 1 == 3, "the sum is off"

def test_passes_after_it():
    assert True
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_failure_pytest_cannot_format_is_reported_and_the_run_goes_on(pytester: pytest.Pytester, workers):
    pytester.makeconftest(BROKEN_FORMATTING)
    pytester.makepyfile(test_two=TESTS_FILE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        result = pytester.runpytest_subprocess("-p", "support.reports", "-p", "no:cacheprovider", *workers)
    output = result.stdout.str()
    result.assert_outcomes(failed=1, passed=1)
    assert "INTERNALERROR" not in output
    assert "the sum is off" in output and "pytest could not format this traceback" in output
    assert 'test_two.py", line 2, in test_fails\n    assert 1 + 1 == 3' in output
    assert "site-packages" not in output[output.index("test_fails ___"):output.index("short test summary")]
