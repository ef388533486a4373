"""The chart runs the SGLang sidecar beside an SGLang pool (helm/moectl/templates/sglang.yaml): rendered with the
sidecar in every group's pod and SGLang started from the placement ConfigMap, and installed into the real
apiserver, where the sidecar's ServiceAccount may write that ConfigMap and evict its group's pods (the restart,
through the PodDisruptionBudget) with the sidecar's own code, and nothing more."""

from __future__ import annotations

import numpy as np
import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from support.chart import CHART, RELEASE, one, render
from support.servers import until

from agents.adapters.sglang.placement_store import PLACEMENT_FILE, StoredPlacement
from agents.adapters.sglang.restart import KubeConfigMapStore, KubeEvictRestart

pytestmark = [pytest.mark.kube, pytest.mark.slow]
VALUES = CHART / "ci" / "sglang-values.yaml"
NAME = f"{RELEASE}-sglang-decode"
SELECTOR = "app.kubernetes.io/component=sglang-decode"


def test_render_puts_the_sidecar_beside_sglang_started_from_the_placement(kube_cluster):
    objects = render(kube_cluster, "-f", str(VALUES))
    pod = one(objects, "StatefulSet", NAME)["spec"]["template"]["spec"]
    sglang, sidecar = pod["containers"]
    assert "--init-expert-location \"$location\"" in sglang["args"][0]
    assert "--expert-distribution-recorder-mode stat" in sglang["args"][0] and "--enable-eplb" not in sglang["args"][0]
    assert {"name": "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "value": "/moectl/dumps"} in sglang["env"]
    assert sidecar["args"][:2] == ["adapter", "sglang"]
    assert sidecar["args"][sidecar["args"].index("--configmap") + 1] == f"{NAME}-placement"
    assert {"name": "placement", "configMap": {"name": f"{NAME}-placement", "optional": True}} in pod["volumes"]
    assert pod["serviceAccountName"] == NAME
    budget = one(objects, "PodDisruptionBudget", NAME)["spec"]
    assert budget["maxUnavailable"] == 1
    rules = one(objects, "Role", NAME)["rules"]
    assert [(r["resources"], sorted(r["verbs"]), r.get("resourceNames")) for r in rules] == [
        (["configmaps"], ["get", "patch"], [f"{NAME}-placement"]), (["pods"], ["list"], None),
        (["pods/eviction"], ["create"], None)]


def test_installed_the_sidecar_may_write_its_placement_and_restart_its_group_and_nothing_else(kube_cluster,
                                                                                             kube_namespace):
    kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace, "-f", str(VALUES), "--no-hooks")
    with kube_cluster.api_client() as admin:
        core = CoreV1Api(admin)
        # the controller-manager makes the StatefulSet's two pods (no kubelet here: they stay Pending)
        until("the StatefulSet's pods", lambda: len(core.list_namespaced_pod(
            kube_namespace, label_selector=SELECTOR).items) == 2, timeout=60)
        uid = core.read_namespaced_pod(f"{NAME}-0", kube_namespace).metadata.uid
    with kube_cluster.service_account_client(kube_namespace, NAME) as client:
        sidecar = CoreV1Api(client)
        store = KubeConfigMapStore(sidecar, kube_namespace, f"{NAME}-placement")
        assert store.read() is None  # empty until the first placement
        table = np.tile(np.arange(288) % 256, (61, 1)).tolist()
        store.write(StoredPlacement(3, 0, 1.0, {"physical_to_logical_map": table}))
        read = store.read()
        assert (read.version, read.previous) == (3, 0) and read.document["physical_to_logical_map"] == table
        evict = KubeEvictRestart(sidecar, kube_namespace, f"statefulset.kubernetes.io/pod-name={NAME}-0")
        assert evict.restart() is True
        with pytest.raises(ApiException) as refused:  # anything else: no
            sidecar.patch_namespaced_config_map(f"{NAME}-model", kube_namespace, {"data": {"config.json": "{}"}})
        assert refused.value.status == 403
        with pytest.raises(ApiException) as refused:
            sidecar.delete_namespaced_pod(f"{NAME}-1", kube_namespace)
        assert refused.value.status == 403
    with kube_cluster.api_client() as admin:
        core = CoreV1Api(admin)
        data = core.read_namespaced_config_map(f"{NAME}-placement", kube_namespace).data
        assert set(data) == {PLACEMENT_FILE, "placement.meta.json"}

        def restarted() -> bool:  # the eviction deleted pod 0 (or is deleting it); the StatefulSet makes it anew
            pods = {p.metadata.name: p.metadata for p in core.list_namespaced_pod(
                kube_namespace, label_selector=SELECTOR).items}
            zero = pods.get(f"{NAME}-0")
            return zero is None or zero.uid != uid or zero.deletion_timestamp is not None
        until("pod 0 evicted", restarted, timeout=30)
        assert core.read_namespaced_pod(f"{NAME}-1", kube_namespace).metadata.deletion_timestamp is None
    kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace)
