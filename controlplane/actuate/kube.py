"""The pool scaler on Kubernetes (a `PoolScaler`, actuate/scaler.py), with the official client. With
leader/lease.py the only modules that import `kubernetes`.

Per pool a target with a scale subresource (`config.KubeScaleTarget`: an apps/v1 Deployment or StatefulSet,
or a custom resource such as a LeaderWorkerSet), all read and written through the same `.../scale` path.
Writes carry the resourceVersion they were decided on (a stale one is refused with 409: re-read, retry, a
bounded number of times) and moectl's field manager, which is how `read` tells who set the replicas last
(managedFields). HorizontalPodAutoscalers targeting the same object (KEDA's included) are other autoscalers.
On a scale-down the pods that go get the lowest `controller.kubernetes.io/pod-deletion-cost`, which the
ReplicaSet controller honours; ordinal controllers (StatefulSet, LeaderWorkerSet) remove the highest ordinals.
Every change and refusal is an events.k8s.io/v1 Event on the target. RBAC it needs: get/patch on the targets'
scale, get on the targets, list on horizontalpodautoscalers, get/list/patch on pods, create on events.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime

import kubernetes
from kubernetes.client import AutoscalingV2Api, CoreV1Api, CustomObjectsApi, EventsV1Api
from kubernetes.client.exceptions import ApiException

from controlplane.actuate.fence import Fence
from controlplane.actuate.scaler import OtherWriter, PoolRef, ScaleState
from controlplane.config import KubeScaleTarget

log = logging.getLogger("moectl.kube")
CONFLICT = 409
MAX_WRITE_ATTEMPTS = 5
MERGE_PATCH = "application/merge-patch+json"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
LEAVING_COST = str(-(2**31))  # int32's lowest: these pods go before any other
REPORTING_CONTROLLER = "moectl.io/controller"


def api_client(kubeconfig: str) -> kubernetes.client.ApiClient:
    """From a kubeconfig file, or (empty) the pod's service account."""
    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    config = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=config)
    return kubernetes.client.ApiClient(config)


class KubeScaler:
    """targets: one per pool; a target without a namespace is in `default_namespace`. reporting_instance:
    this replica, on its Events."""

    def __init__(self, client: kubernetes.client.ApiClient, targets: list[KubeScaleTarget], *,
                 default_namespace: str, field_manager: str, reporting_instance: str):
        self.objects, self.core = CustomObjectsApi(client), CoreV1Api(client)
        self.autoscalers, self.events = AutoscalingV2Api(client), EventsV1Api(client)
        self.field_manager, self.reporting_instance = field_manager, reporting_instance
        self.targets = {(t.deployment, t.role): t if t.namespace else t.model_copy(update={"namespace":
                                                                                            default_namespace})
                        for t in targets}
        self.num_write_conflicts = 0  # writes refused for a stale resourceVersion, then retried

    def manages(self, pool: PoolRef) -> bool:
        return (pool.deployment, pool.role) in self.targets

    def read(self, pool: PoolRef) -> ScaleState:
        target = self.targets[(pool.deployment, pool.role)]
        return self._state(target, self._scale(target), autoscalers=self._autoscalers(target))

    def set_replicas(self, pool: PoolRef, replicas: int, *, expected: int, fence: Fence) -> ScaleState:
        target = self.targets[(pool.deployment, pool.role)]
        for _ in range(MAX_WRITE_ATTEMPTS):
            scale = self._scale(target)
            if scale["spec"].get("replicas", 0) == replicas:
                return self._state(target, scale)
            if scale["spec"].get("replicas", 0) != expected:
                raise OtherWriter(self._state(target, scale))
            fence.check()
            body = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]},
                    "spec": {"replicas": replicas}}
            try:
                written = self.objects.patch_namespaced_custom_object_scale(
                    target.group, target.version, target.namespace, target.resource, target.name, body,
                    field_manager=self.field_manager, _content_type=MERGE_PATCH)
            except ApiException as error:
                if error.status != CONFLICT:
                    raise
                self.num_write_conflicts += 1
                log.info("%s/%s changed since read (409): reading it again", target.kind, target.name)
                continue
            return self._state(target, written, writer=self.field_manager)
        raise RuntimeError(f"{target.kind} {target.namespace}/{target.name} kept changing: {MAX_WRITE_ATTEMPTS} "
                           f"writes of its scale refused (409); retrying next pass")

    def prepare_scale_down(self, pool: PoolRef, num_leaving: int, *, fence: Fence,
                           chosen: tuple[str, ...] = ()) -> list[str]:
        target = self.targets[(pool.deployment, pool.role)]
        selector = self._scale(target).get("status", {}).get("selector")
        if not selector or num_leaving <= 0:
            return []
        pods = [p for p in self.core.list_namespaced_pod(target.namespace, label_selector=selector).items
                if p.metadata.deletion_timestamp is None]
        if not any(o.kind == "ReplicaSet" for p in pods for o in p.metadata.owner_references or []):
            leaving = sorted(pods, key=_ordinal, reverse=True)[:num_leaving]  # the controller's own choice
            return [p.metadata.name for p in leaving]
        # the ReplicaSet controller's own order after the cost: not ready first, then the newest
        leaving = sorted(pods, key=lambda p: (p.metadata.name not in chosen, _is_ready(p),
                                              -p.metadata.creation_timestamp.timestamp()))[:num_leaving]
        for pod in leaving:
            fence.check()
            self.core.patch_namespaced_pod(pod.metadata.name, target.namespace,
                                           {"metadata": {"annotations": {DELETION_COST: LEAVING_COST}}},
                                           field_manager=self.field_manager, _content_type=MERGE_PATCH)
        return [p.metadata.name for p in leaving]

    def report(self, pool: PoolRef, *, reason: str, message: str, is_warning: bool = False) -> None:
        target = self.targets[(pool.deployment, pool.role)]
        record_event(self.events, kubernetes.client.V1ObjectReference(
            api_version=target.api_version, kind=target.kind, name=target.name, namespace=target.namespace),
            reason=reason, action="Scale", note=message, instance=self.reporting_instance, is_warning=is_warning)

    def _scale(self, target: KubeScaleTarget) -> dict:
        return self.objects.get_namespaced_custom_object_scale(target.group, target.version, target.namespace,
                                                               target.resource, target.name)

    def _replicas_writer(self, target: KubeScaleTarget) -> str | None:
        """The field manager owning spec.replicas: whoever changed them last."""
        found = self.objects.get_namespaced_custom_object(target.group, target.version, target.namespace,
                                                          target.resource, target.name)
        for entry in found["metadata"].get("managedFields") or []:
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
                return entry["manager"]
        return None

    def _autoscalers(self, target: KubeScaleTarget) -> tuple[str, ...]:
        found = []
        for hpa in self.autoscalers.list_namespaced_horizontal_pod_autoscaler(target.namespace).items:
            ref = hpa.spec.scale_target_ref
            group = (ref.api_version or "").rpartition("/")[0]
            if (ref.kind, ref.name, group) != (target.kind, target.name, target.group):
                continue
            keda = next((o for o in hpa.metadata.owner_references or [] if o.kind == "ScaledObject"), None)
            found.append(f"KEDA ScaledObject {target.namespace}/{keda.name}" if keda
                         else f"HorizontalPodAutoscaler {target.namespace}/{hpa.metadata.name}")
        return tuple(found)

    def _state(self, target: KubeScaleTarget, scale: dict, *, writer: str | None = None,
               autoscalers: tuple[str, ...] = ()) -> ScaleState:
        writer = writer or self._replicas_writer(target)
        return ScaleState(target=f"{target.kind} {target.namespace}/{target.name}",
                          replicas=scale["spec"].get("replicas", 0), running=scale.get("status", {}).get("replicas"),
                          writer=writer, is_ours=writer == self.field_manager, autoscalers=autoscalers)


def record_event(events: EventsV1Api, regarding: kubernetes.client.V1ObjectReference, *, reason: str, action: str,
                 note: str, instance: str, is_warning: bool = False) -> None:
    """An events.k8s.io/v1 Event on `regarding`, named as client-go names them (object.nanoseconds in hex). An
    Event is a courtesy: failing to record one is logged, never a reason to stop acting."""
    event = kubernetes.client.EventsV1Event(
        metadata=kubernetes.client.V1ObjectMeta(name=f"{regarding.name}.{time.time_ns():x}",
                                                namespace=regarding.namespace),
        event_time=datetime.now(UTC), reporting_controller=REPORTING_CONTROLLER, reporting_instance=instance[:128],
        action=action, reason=reason, note=note[:1024], type="Warning" if is_warning else "Normal",
        regarding=regarding)
    try:
        events.create_namespaced_event(regarding.namespace, event)
    except ApiException as error:
        log.warning("could not record Event %s on %s %s: %s %s", reason, regarding.kind, regarding.name, error.reason,
                    error.body)


def _ordinal(pod: kubernetes.client.V1Pod) -> int:
    found = re.search(r"-(\d+)$", pod.metadata.name)
    return int(found.group(1)) if found else -1


def _is_ready(pod: kubernetes.client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
