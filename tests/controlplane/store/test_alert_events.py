"""Alert events: Alertmanager delivers at least once; each (fingerprint, startsAt, status) is stored once,
fitted to its columns."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from controlplane.store import alerts

NOW = 1_800_000_000.0


def record(session, fingerprint: str = "fp", status: str = "firing", starts_at: str = "2027-01-15T08:00:00Z",
           alertname: str = "MoectlExpertImbalanceHigh"):
    """The new event, or None when this notification was stored already."""
    alert = alerts.Received(fingerprint, starts_at, status, alertname, {"role": "decode"})
    if alerts.find(session, alert) is not None:
        return None
    return alerts.record(session, alert, deployment="d", outcome="", now=NOW)


def test_each_notification_is_stored_once(sessions):
    with sessions() as session, session.begin():
        first = record(session)
        assert first is not None and record(session) is None  # redelivered
        assert record(session, status="resolved") is not None  # its resolution is news
        assert record(session, starts_at="2027-01-15T09:00:00Z") is not None  # fired again later
        assert record(session, fingerprint="other") is not None
        assert [e.id for e in alerts.recent(session, deployment="d", limit=10)][-1] == first.id
        assert alerts.recent(session, deployment="elsewhere", limit=10) == []
    with pytest.raises(IntegrityError), sessions() as session, session.begin():  # a concurrent delivery's insert
        alerts.record(session, alerts.Received("fp", "2027-01-15T08:00:00Z", "firing"), deployment=None, outcome="",
                      now=NOW)


def test_what_does_not_fit_is_named_and_stored_fitted(sessions):
    long_fingerprint, name = "f" * 80, "Moectl\x00" + "A" * 300
    assert alerts.misfits(alerts.Received(long_fingerprint, "2027-01-15T08:00:00Z", "firing", name)) == [
        "fingerprint is 80 characters, at most 64 are kept", "alertname is 307 characters, at most 256 are kept",
        "alertname holds a NUL byte"]
    with sessions() as session, session.begin():
        event = record(session, fingerprint=long_fingerprint, alertname=name)
        assert len(event.fingerprint) == 64 and event.fingerprint != long_fingerprint[:64]
        assert event.alertname.startswith("Moectl\\0AAA") and len(event.alertname) == 256
        assert record(session, fingerprint=long_fingerprint) is None  # the retry finds it by the same key
        assert record(session, fingerprint="f" * 79 + "g") is not None  # another long key is another event
