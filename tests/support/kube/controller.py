"""The controller's identity in the test cluster, exactly as the Helm chart grants it: a ServiceAccount with
a Role holding the verbs the pool actuator and the Lease elector use (helm/moectl/templates/rbac.yaml), and
no more; a client or a kubeconfig authenticated as it by a TokenRequest token."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api

from controlplane.config import KubeScaleTarget
from support.kube.client import KubeCluster

SERVICE_ACCOUNT = "moectl"
meta = kubernetes.client.V1ObjectMeta
rule = kubernetes.client.V1PolicyRule


def controller_rules(targets: list[KubeScaleTarget], lease_name: str) -> list[kubernetes.client.V1PolicyRule]:
    """get/patch on each target's scale and get on the target, by name; list/watch HPAs; get/list/patch pods;
    create/patch events; get/update the one Lease by name, create leases."""
    rules = []
    for target in targets:
        rules += [rule(api_groups=[target.group], resources=[f"{target.resource}/scale"], resource_names=[target.name],
                       verbs=["get", "patch"]),
                  rule(api_groups=[target.group], resources=[target.resource], resource_names=[target.name],
                       verbs=["get"])]
    return rules + [
        rule(api_groups=["autoscaling"], resources=["horizontalpodautoscalers"], verbs=["list", "watch"]),
        rule(api_groups=[""], resources=["pods"], verbs=["get", "list", "patch"]),
        rule(api_groups=["", "events.k8s.io"], resources=["events"], verbs=["create", "patch"]),
        rule(api_groups=["coordination.k8s.io"], resources=["leases"], resource_names=[lease_name],
             verbs=["get", "update"]),
        rule(api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create"]),
    ]


def grant_controller(cluster: KubeCluster, namespace: str, targets: list[KubeScaleTarget],
                     lease_name: str = "moectl-leader") -> None:
    """The controller's ServiceAccount, Role and RoleBinding in `namespace`."""
    with cluster.api_client() as admin:
        CoreV1Api(admin).create_namespaced_service_account(namespace, kubernetes.client.V1ServiceAccount(
            metadata=meta(name=SERVICE_ACCOUNT)))
        rbac = RbacAuthorizationV1Api(admin)
        rbac.create_namespaced_role(namespace, kubernetes.client.V1Role(
            metadata=meta(name="moectl"), rules=controller_rules(targets, lease_name)))
        rbac.create_namespaced_role_binding(namespace, kubernetes.client.V1RoleBinding(
            metadata=meta(name="moectl"),
            role_ref=kubernetes.client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="moectl"),
            subjects=[kubernetes.client.RbacV1Subject(kind="ServiceAccount", name=SERVICE_ACCOUNT,
                                                      namespace=namespace)]))


def controller_kubeconfig(cluster: KubeCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig authenticating as the controller's ServiceAccount (what MOECTL_KUBECONFIG points at)."""
    token = cluster.service_account_token(namespace, SERVICE_ACCOUNT)
    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "moectl", "preferences": {},
        "clusters": [{"name": "test", "cluster": {"server": cluster.server,
                                                  "certificate-authority": str(cluster.ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "moectl", "context": {"cluster": "test", "user": user, "namespace": namespace}}],
    }
    path.write_text(json.dumps(config, indent=2))
    return path
