"""The pool scaler on Kubernetes (a `PoolScaler`, actuate/scaler.py), with the official client. With
leader/lease.py the only modules that import `kubernetes`.

Per pool a target with a scale subresource (`config.KubeScaleTarget`: a kind of controlplane/kube_kinds.py, or
another custom resource), all read and written through the same `.../scale` path. A read also says what one
replica is (pods, GPUs), how many replicas are ready (the kind's status field, or counted from the pods), and how
many the scheduler cannot place (a pod `PodScheduled=False, Unschedulable`: a full cluster; not starting).
Writes carry the resourceVersion they were decided on (a stale one is refused with 409: re-read, retry, a
bounded number of times) and moectl's field manager, which is how `read` tells who set the replicas last
(managedFields). HorizontalPodAutoscalers targeting the same object (KEDA's included) are other autoscalers.
On a scale-down the pods that go get the lowest `controller.kubernetes.io/pod-deletion-cost`, which the
ReplicaSet controller honours; ordinal controllers (StatefulSet, LeaderWorkerSet groups, the adapters'
workloads) remove the highest ordinals. A custom resource without spec.replicas answers its scale's GET with
500; that becomes a `MissingReplicas` error naming the field to set.
Every change and refusal is an events.k8s.io/v1 Event on the target. RBAC it needs: get/patch on the targets'
scale, get on the targets, list on horizontalpodautoscalers, get/list/patch on pods, create on events.
"""

from __future__ import annotations

import dataclasses
import json
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
from controlplane.kube_kinds import field, kind_of

log = logging.getLogger("moectl.kube")
CONFLICT = 409
MAX_WRITE_ATTEMPTS = 5
MERGE_PATCH = "application/merge-patch+json"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
LEAVING_COST = str(-(2**31))  # int32's lowest: these pods go before any other
REPORTING_CONTROLLER = "moectl.io/controller"
GPU = "nvidia.com/gpu"


class MissingReplicas(RuntimeError):
    """The target has no spec.replicas, so its scale subresource cannot be read (the apiserver answers 500)."""


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
        scale, found = self._scale(target), self._object(target)
        state = self._state(target, scale, found=found, autoscalers=self._autoscalers(target))
        return self._with_pods(target, state, scale, found)

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
        pods = [p for p in self._pods(target, self._scale(target)) if p.metadata.deletion_timestamp is None]
        if not pods or num_leaving <= 0:
            return []
        group_label = kind_of(target.kind, target.api_version).group_label
        if group_label is not None:  # whole groups go, the highest indices (the LeaderWorkerSet controller's order)
            indices = sorted({int(p.metadata.labels.get(group_label, -1)) for p in pods}, reverse=True)[:num_leaving]
            return sorted(p.metadata.name for p in pods if int(p.metadata.labels.get(group_label, -1)) in indices)
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
        try:
            return self.objects.get_namespaced_custom_object_scale(target.group, target.version, target.namespace,
                                                                   target.resource, target.name)
        except ApiException as error:
            if error.status == 500 and "does not exist" in (error.body or ""):
                raise MissingReplicas(
                    f"{target.kind} {target.namespace}/{target.name} has no spec.replicas, so its scale cannot be "
                    f"read (the apiserver answered 500: {_message(error)}): set spec.replicas on it (its current "
                    f"size, e.g. `kubectl patch {target.resource}.{target.group} {target.name} -n "
                    f"{target.namespace} --type=merge -p '{{\"spec\":{{\"replicas\":1}}}}'`)") from error
            raise

    def _object(self, target: KubeScaleTarget) -> dict:
        return self.objects.get_namespaced_custom_object(target.group, target.version, target.namespace,
                                                         target.resource, target.name)

    def _pods(self, target: KubeScaleTarget, scale: dict) -> list[kubernetes.client.V1Pod]:
        """The pool's pods: by the kind's own label (a LeaderWorkerSet's scale selector matches leaders only),
        else by the scale's selector; none when it has none yet."""
        label = kind_of(target.kind, target.api_version).pods_label
        selector = f"{label}={target.name}" if label else scale.get("status", {}).get("selector")
        return self.core.list_namespaced_pod(target.namespace, label_selector=selector).items if selector else []

    def _with_pods(self, target: KubeScaleTarget, state: ScaleState, scale: dict, found: dict) -> ScaleState:
        """`state` with what one replica is, how many are ready and how many cannot be placed."""
        kind = kind_of(target.kind, target.api_version)
        pods_per_replica = int(field(found, kind.size_path) or target.pods_per_replica)
        pods = [p for p in self._pods(target, scale) if p.metadata.deletion_timestamp is None]
        gpus = sum(_gpus(p) for p in pods)
        ready = field(found, kind.ready_path)
        if kind.ready_path is None:
            ready = sum(_is_ready(p) for p in pods) // pods_per_replica
        unschedulable = [c for p in pods for c in p.status.conditions or []
                         if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"]
        return dataclasses.replace(
            state, num_ready=int(ready or 0), pods_per_replica=pods_per_replica,
            gpus_per_replica=round(gpus * pods_per_replica / len(pods)) if pods else 0,
            num_unschedulable=-(-len(unschedulable) // pods_per_replica),
            unschedulable_reason=unschedulable[0].message or "" if unschedulable else "")

    def _replicas_writer(self, target: KubeScaleTarget, found: dict | None = None) -> str | None:
        """The field manager owning spec.replicas: whoever changed them last."""
        found = found or self._object(target)
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

    def _state(self, target: KubeScaleTarget, scale: dict, *, writer: str | None = None, found: dict | None = None,
               autoscalers: tuple[str, ...] = ()) -> ScaleState:
        writer = writer or self._replicas_writer(target, found)
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


def _gpus(pod: kubernetes.client.V1Pod) -> int:
    return sum(int((c.resources.limits or {}).get(GPU, 0)) for c in pod.spec.containers if c.resources)


def _message(error: ApiException) -> str:
    try:
        return json.loads(error.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(error.body)[:300]


def _is_ready(pod: kubernetes.client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
