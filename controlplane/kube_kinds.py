"""The workload kinds moectl sizes on Kubernetes, and what one replica of each is. Pure data.

Each kind is scaled through its scale subresource (`<resource>/scale`); they differ in what one replica of the
scale is (a pod, or a group of pods), where the ready replicas are, and how the pool's pods are found:

- Deployment, StatefulSet: a replica is a pod; ready: status.readyReplicas; pods: the scale's selector.
- LeaderWorkerSet: a group of spec.leaderWorkerTemplate.size pods; ready: status.readyReplicas (groups); pods:
  label leaderworkerset.sigs.k8s.io/name (the scale's selector matches the leaders only).
- Grove PodCliqueScalingGroup: a multi-node unit (`pods_per_replica`); ready: status.availableReplicas.
- DynamoGraphDeploymentScalingAdapter: a service replica (`pods_per_replica`); ready: counted from the pods (the
  adapter has no ready count).
- RoleBasedGroupScalingAdapter: a role instance (`pods_per_replica`); ready: status.readyReplicas.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadKind:
    kind: str
    api_version: str
    resource: str  # the plural; RBAC grants `<resource>/scale` and `<resource>`
    ready_path: tuple[str, ...] | None  # the object's ready replicas; None: count ready replicas from the pods
    size_path: tuple[str, ...] | None = None  # the object's pods per replica; None: the target's pods_per_replica
    pods_label: str | None = None  # pods labelled `<label>=<name>`; None: the scale's status.selector
    group_label: str | None = None  # a pod's replica index; the highest go first on a scale-down


LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"

KINDS = {k.kind: k for k in (
    WorkloadKind("Deployment", "apps/v1", "deployments", ("status", "readyReplicas")),
    WorkloadKind("StatefulSet", "apps/v1", "statefulsets", ("status", "readyReplicas")),
    WorkloadKind("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "leaderworkersets", ("status", "readyReplicas"),
                 size_path=("spec", "leaderWorkerTemplate", "size"), pods_label=LWS_NAME, group_label=LWS_GROUP),
    WorkloadKind("PodCliqueScalingGroup", "grove.io/v1alpha1", "podcliquescalinggroups",
                 ("status", "availableReplicas"), group_label="grove.io/podcliquescalinggroup-replica-index"),
    WorkloadKind("DynamoGraphDeploymentScalingAdapter", "nvidia.com/v1beta1", "dynamographdeploymentscalingadapters",
                 None),
    WorkloadKind("RoleBasedGroupScalingAdapter", "workloads.x-k8s.io/v1alpha2", "rolebasedgroupscalingadapters",
                 ("status", "readyReplicas")),
)}


def kind_of(kind: str, api_version: str) -> WorkloadKind:
    """The known kind, or a custom resource read generically (its scale's selector, ready counted from pods)."""
    known = KINDS.get(kind)
    if known is not None and known.api_version.split("/")[0] == api_version.split("/")[0]:
        return known
    return WorkloadKind(kind, api_version, "", None)


def field(obj: dict, path: tuple[str, ...] | None) -> object:
    """obj[path[0]][path[1]]..., None where absent."""
    for key in path or ():
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if path else None
