"""pytest plugin (tests/conftest.py loads it): a failing test is reported even where pytest cannot format
its traceback, instead of ending the xdist worker and with it the whole run."""

from __future__ import annotations

import traceback

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failure's report even where pytest cannot format its traceback. CPython 3.11's `ast.parse`, which
    pytest uses to show a frame's source, can raise "SystemError: AST constructor recursion depth mismatch"
    after greenlets (Playwright's sync API) switched stacks; raised while making the report, it ends the
    xdist worker and with it the whole run. Then the traceback is reported as plain lines."""
    try:
        return (yield)
    except SystemError as error:
        frames = traceback.extract_tb(call.excinfo.tb) if call.excinfo else []
        # from the test's own file on, as pytest cuts a traceback (what calls the test is pytest's)
        first = next((i for i, f in enumerate(frames) if f.filename == str(item.path)), 0)
        lines = [f'File "{f.filename}", line {f.lineno}, in {f.name}\n    {f.line}' for f in frames[first:]]
        message = call.excinfo.exconly() if call.excinfo else ""
        longrepr = "\n".join([*lines, message, f"(pytest could not format this traceback: {error})"])
        return pytest.TestReport(item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed", longrepr,
                                 call.when, duration=call.duration, start=call.start, stop=call.stop)
