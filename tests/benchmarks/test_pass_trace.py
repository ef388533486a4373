"""The pass trace (benchmarks/pass_trace.py) finds the pass that rebalances and counts its walk consistently."""

from __future__ import annotations

from benchmarks.pass_trace import trace_first_rebalance


def test_the_traced_pass_rebalances_and_its_counts_add_up(tmp_path):
    found = trace_first_rebalance(tmp_path / "moectl.db", max_windows=12, top=1000)  # every module
    assert found is not None, "no pass rebalanced the skewed fleet"
    s = found.summary
    arrivals = dict(s.top)
    # the pass that rebalanced planned (the solver ran), read the store and wrote through the one writer
    assert arrivals.get("controlplane.solve.placement.solver", 0) > 0
    assert arrivals.get("controlplane.actuate.change", 0) > 0
    assert s.returns == s.stops - s.modules and s.modules == len(arrivals)
    assert 0 < s.stage_stops <= s.stops
    # the session's walk: the store read and written, the pass and the one writer handed it; never the planner
    walk = s.session
    session_modules = dict(walk.top)
    assert walk.returns == walk.stops - walk.modules and walk.modules == len(session_modules) == len(
        {stop.rsplit(".", 1)[0] for stop in walk.path}) and len(walk.path) == walk.stops
    assert session_modules.get("controlplane.store.pools", 0) > 0 and session_modules.get("controlplane.actuate.change")
    assert not [m for m in session_modules if m.startswith(("controlplane.plan.", "controlplane.solve."))]
