"""Alert events: Alertmanager delivers at least once; each (fingerprint, startsAt, status) is stored once."""

from __future__ import annotations

from controlplane.store import alerts

NOW = 1_800_000_000.0


def record(session, fingerprint: str = "fp", status: str = "firing", starts_at: str = "2027-01-15T08:00:00Z"):
    return alerts.record_once(session, fingerprint=fingerprint, starts_at=starts_at, status=status,
                              alertname="MoectlExpertImbalanceHigh", deployment="d", labels={"role": "decode"},
                              now=NOW)


def test_each_notification_is_stored_once(sessions):
    with sessions() as session, session.begin():
        first = record(session)
        assert first is not None and record(session) is None  # redelivered
        assert record(session, status="resolved") is not None  # its resolution is news
        assert record(session, starts_at="2027-01-15T09:00:00Z") is not None  # fired again later
        assert record(session, fingerprint="other") is not None
        assert [e.id for e in alerts.recent(session, deployment="d", limit=10)][-1] == first.id
        assert alerts.recent(session, deployment="elsewhere", limit=10) == []
