"""RBAC in the test cluster is the real authorizer: a ServiceAccount (authenticated by a TokenRequest token,
as in a pod) can do exactly what a Role grants it, and is refused (403) the rest."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import AppsV1Api, CoreV1Api, RbacAuthorizationV1Api
from support.kube.objects import deployment, status_of

pytestmark = [pytest.mark.kube, pytest.mark.slow]
meta = kubernetes.client.V1ObjectMeta


def make_service_account(core: CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_service_account(namespace, kubernetes.client.V1ServiceAccount(metadata=meta(name=name)))


def test_service_account_without_rbac_is_refused_and_the_admin_is_not(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        make_service_account(CoreV1Api(admin), kube_namespace, "nobody")
        assert CoreV1Api(admin).list_namespaced_pod(kube_namespace).items == []
    with kube_cluster.service_account_client(kube_namespace, "nobody") as client:
        assert status_of(lambda: CoreV1Api(client).list_namespaced_pod(kube_namespace)) == 403


def test_role_on_deployments_scale_lets_it_patch_that_deployment_and_nothing_else(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        core, apps, rbac = CoreV1Api(admin), AppsV1Api(admin), RbacAuthorizationV1Api(admin)
        make_service_account(core, kube_namespace, "scaler")
        for name in ("decode", "prefill"):
            apps.create_namespaced_deployment(kube_namespace, deployment(name, replicas=1))
        core.create_namespaced_secret(kube_namespace, kubernetes.client.V1Secret(metadata=meta(name="tokens"),
                                                                                  string_data={"t": "x"}))
        rbac.create_namespaced_role(kube_namespace, kubernetes.client.V1Role(metadata=meta(name="scale-decode"), rules=[
            kubernetes.client.V1PolicyRule(api_groups=["apps"], resources=["deployments/scale"],
                                           resource_names=["decode"], verbs=["get", "patch"])]))
        rbac.create_namespaced_role_binding(kube_namespace, kubernetes.client.V1RoleBinding(
            metadata=meta(name="scale-decode"),
            role_ref=kubernetes.client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                                 name="scale-decode"),
            subjects=[kubernetes.client.RbacV1Subject(kind="ServiceAccount", name="scaler",
                                                      namespace=kube_namespace)]))

        with kube_cluster.service_account_client(kube_namespace, "scaler") as client:
            scaler = AppsV1Api(client)
            assert scaler.read_namespaced_deployment_scale("decode", kube_namespace).spec.replicas == 1
            scaler.patch_namespaced_deployment_scale("decode", kube_namespace, {"spec": {"replicas": 3}})
            assert apps.read_namespaced_deployment("decode", kube_namespace).spec.replicas == 3

            assert status_of(lambda: scaler.patch_namespaced_deployment_scale("prefill", kube_namespace,
                                                                              {"spec": {"replicas": 3}})) == 403
            assert status_of(lambda: scaler.read_namespaced_deployment("decode", kube_namespace)) == 403
            assert status_of(lambda: CoreV1Api(client).read_namespaced_secret("tokens", kube_namespace)) == 403
        assert apps.read_namespaced_deployment("prefill", kube_namespace).spec.replicas == 1
