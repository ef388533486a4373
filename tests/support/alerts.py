"""Alertmanager webhook bodies (payload version 4), as Alertmanager sends them."""

from __future__ import annotations


def payload(*alerts: dict, status: str = "firing") -> dict:
    """A version 4 webhook body, as Alertmanager sends it (with fields we do not read)."""
    return {"version": "4", "groupKey": '{}:{alertname="MoectlExpertImbalanceHigh"}', "truncatedAlerts": 0,
            "status": status, "receiver": "moectl", "groupLabels": {"alertname": "MoectlExpertImbalanceHigh"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
            "alerts": list(alerts), "somethingNew": {"added": "in a later Alertmanager"}}


def alert(fingerprint: str, *, status: str = "firing", deployment: str = "sim-0", action: str = "rebalance",
          starts_at: str = "2027-01-15T08:00:00.000Z") -> dict:
    return {"status": status, "startsAt": starts_at, "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint,
            "labels": {"alertname": "MoectlExpertImbalanceHigh", "deployment": deployment, "role": "decode",
                       "severity": "warning", "moectl_action": action},
            "annotations": {"summary": "expert load imbalance"}}
