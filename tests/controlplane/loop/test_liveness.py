"""The loop's liveness: failed passes back off (doubling, bounded, reset by a pass that works); the loop is
stalled when a pass is overdue, and dead when its thread ended; a failing database does not kill it."""

from __future__ import annotations

import threading

from support.fleet import run_windows, start_fleet

import controlplane.loop.reconcile as reconcile
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.results import PassResult


class Ticks:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_back_off_doubling_up_to_the_bound_and_a_good_pass_resets():
    ticks = Ticks()
    liveness = LoopLiveness(interval_seconds=5, max_backoff_seconds=30, max_delay_seconds=30, clock=ticks)
    waits = [liveness.passed(is_ok=False) for _ in range(6)]
    assert waits == [5, 10, 20, 30, 30, 30]
    assert liveness.report()[1]["consecutive_failures"] == 6
    assert liveness.passed(is_ok=True) == 5 and liveness.report()[1]["consecutive_failures"] == 0


def test_an_overdue_pass_or_an_ended_thread_is_not_alive():
    ticks = Ticks()
    liveness = LoopLiveness(interval_seconds=5, max_backoff_seconds=30, max_delay_seconds=30, clock=ticks)
    liveness.passed(is_ok=False)  # next due in 5 s
    ticks.now += 5 + 30  # due, and 30 s into its pass: still within the allowed delay
    assert liveness.report()[0]
    ticks.now += 1
    is_alive, shown = liveness.report()
    assert not is_alive and shown["status"] == "stalled" and shown["overdue_seconds"] == 31
    liveness.passed(is_ok=True)
    assert liveness.report()[0]
    liveness.stopped()
    is_alive, shown = liveness.report()
    assert not is_alive and shown["status"] == "stopped"


def test_the_loop_survives_failing_passes_and_resumes(client, sessions, settings, clock, monkeypatch):
    fleet = start_fleet(client, {"mode": "observe"})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    real, failures = reconcile.deployments.list_all, iter(range(3))

    def flaky(session):  # the database "goes away" for three passes
        if next(failures, None) is not None:
            raise reconcile.OperationalError("SELECT", {}, ConnectionError("server closed the connection"))
        return real(session)

    monkeypatch.setattr(reconcile.deployments, "list_all", flaky)
    fast = settings.model_copy(update={"reconcile_seconds": 0.01, "max_reconcile_backoff_seconds": 0.02})
    liveness, results, stop = LoopLiveness.for_settings(fast), [], threading.Event()

    def on_pass(result: PassResult) -> None:
        results.append(result)
        if len(results) == 6:
            stop.set()

    thread = threading.Thread(target=Reconciler(fast).run_forever, kwargs=dict(
        sessions=sessions, stop=stop, liveness=liveness, on_pass=on_pass, clock=lambda: clock.now + 6))
    thread.start()
    thread.join(timeout=60)
    assert [r.is_failed for r in results] == [True, True, True, False, False, False]
    assert [r.num_errors for r in results][:3] == [1, 1, 1] and results[-1].plans
    assert liveness.report()[1]["status"] == "stopped" and liveness.num_passes == 6
