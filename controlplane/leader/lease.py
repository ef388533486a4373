"""Leader election through a coordination.k8s.io/v1 Lease, compared-and-set by resourceVersion (a stale
write is refused with 409). The term is the Lease's leaseTransitions. A new holder is reported as an Event on
the Lease, as client-go does. Needs get, create and update on leases, and create on events."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import kubernetes
from kubernetes.client import CoordinationV1Api, EventsV1Api
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session

from controlplane.actuate.kube import record_event
from controlplane.leader.elector import LeaderRecord

CONFLICT, NOT_FOUND = 409, 404


class LeaseRecords:
    def __init__(self, api_client: kubernetes.client.ApiClient, *, namespace: str, name: str):
        self.leases, self.namespace, self.name = CoordinationV1Api(api_client), namespace, name
        self.events = EventsV1Api(api_client)
        self.where = f"Lease {namespace}/{name}"
        self._acquired_at: datetime | None = None  # the Lease's acquireTime as last read: a renewal keeps it

    def read(self, session: Session | None = None) -> LeaderRecord | None:
        """`session` is not used: a Lease is read with its own request."""
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status == NOT_FOUND:
                return None
            raise
        spec = lease.spec
        self._acquired_at = spec.acquire_time
        renewed = spec.renew_time or spec.acquire_time
        return LeaderRecord(spec.holder_identity or "", spec.lease_transitions or 0,
                            float(spec.lease_duration_seconds or 0), renewed.timestamp() if renewed else 0.0,
                            lease.metadata.resource_version)

    def create(self, record: LeaderRecord) -> bool:
        try:
            self.leases.create_namespaced_lease(self.namespace, self._lease(record, None, acquired=True))
        except ApiException as error:
            if error.status == CONFLICT:  # AlreadyExists
                return False
            raise
        self._report(record)
        return True

    def replace(self, expected: LeaderRecord, record: LeaderRecord) -> bool:
        acquired = (record.holder, record.term) != (expected.holder, expected.term)
        try:
            self.leases.replace_namespaced_lease(self.name, self.namespace,
                                                 self._lease(record, expected.revision, acquired=acquired))
        except ApiException as error:
            if error.status == CONFLICT:
                return False
            raise
        if acquired and record.holder:
            self._report(record)
        return True

    def _report(self, record: LeaderRecord) -> None:
        """An Event on the Lease: who leads now."""
        lease = kubernetes.client.V1ObjectReference(api_version="coordination.k8s.io/v1", kind="Lease", name=self.name,
                                                    namespace=self.namespace)
        record_event(self.events, lease, reason="LeaderElection", action="Lead", instance=record.holder,
                     note=f"{record.holder} became leader (term {record.term})")

    def _lease(self, record: LeaderRecord, revision: str | None, *, acquired: bool) -> kubernetes.client.V1Lease:
        renewed = datetime.fromtimestamp(record.renewed_at, UTC)
        if renewed.microsecond == 0:  # the client sends isoformat(), which drops the fraction MicroTime requires
            renewed += timedelta(microseconds=1)
        spec = kubernetes.client.V1LeaseSpec(holder_identity=record.holder or None,
                                             lease_duration_seconds=math.ceil(record.lease_seconds),
                                             lease_transitions=record.term, renew_time=renewed,
                                             acquire_time=renewed if acquired else self._acquired_at)
        return kubernetes.client.V1Lease(metadata=kubernetes.client.V1ObjectMeta(
            name=self.name, namespace=self.namespace, resource_version=revision), spec=spec)
