"""The chart runs a vLLM pool steered by moectl (helm/moectl/templates/vllm.yaml): rendered with vLLM started with
moectl's plugins and the `moectl adapter vllm` sidecar beside it (the controller's URL, the chart's token, the
checkpoint's config.json), the pool named to the controller as a scale target; installed into the real apiserver,
the controller's own scaler (controlplane/actuate/kube.py), authenticated as the chart's ServiceAccount, reads and
sets the pool's /scale and is refused everything else about it. No kubelet here: the pods stay Pending, so vLLM
itself does not run (tests/adapters/test_vllm_live.py and `moectl up --engine vllm` run it)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import AppsV1Api, CoreV1Api
from support.chart import CHART, RELEASE, one, render
from support.kube.objects import status_of
from support.servers import until

from controlplane.actuate.fence import SOLE
from controlplane.actuate.kube import KubeScaler
from controlplane.actuate.scaler import PoolRef
from controlplane.config import KubeScaleTarget

pytestmark = [pytest.mark.kube, pytest.mark.slow]
VALUES = CHART / "ci" / "vllm-values.yaml"
NAME = f"{RELEASE}-vllm-unified"
SELECTOR = "app.kubernetes.io/component=vllm-unified"
POOL = PoolRef("ds", "unified")


def env_of(container: dict) -> dict[str, dict | str]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def scale_targets(objects: list[dict]) -> list[KubeScaleTarget]:
    """What the rendered controller is told to scale (MOECTL_KUBE_SCALE_TARGETS, read as controlplane/config.py
    reads it)."""
    [controller] = one(objects, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"]
    return [KubeScaleTarget.model_validate(t) for t in json.loads(env_of(controller)["MOECTL_KUBE_SCALE_TARGETS"])]


def test_render_puts_the_sidecar_beside_vllm_with_the_plugins_and_names_the_pool_to_the_controller(kube_cluster):
    objects = render(kube_cluster, "-f", str(VALUES))
    workload = one(objects, "Deployment", NAME)
    assert "replicas" not in workload["spec"]  # the controller owns the count
    pod = workload["spec"]["template"]["spec"]
    vllm, sidecar = pod["containers"]
    assert vllm["image"] == "registry.example.com/moectl-vllm:0.34.0"
    assert vllm["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert vllm["args"][:2] == ["--model", "/models/DeepSeek-V3"] and "--enable-eplb" in vllm["args"]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 8
    token = {"secretKeyRef": {"name": f"{RELEASE}-tokens", "key": "agent-token"}}
    assert env_of(vllm) == {"VLLM_PLUGINS": "moectl", "MOECTL_VLLM_STATE_DIR": "/moectl/vllm",
                            "MOECTL_VLLM_TOKEN": token}
    assert sidecar["args"][:4] == ["adapter", "vllm", "--engine", "http://127.0.0.1:8000"]
    flags = dict(zip(sidecar["args"][2::2], sidecar["args"][3::2], strict=False))
    assert flags["--controller"] == f"http://{RELEASE}.default.svc:8600"
    assert (flags["--deployment"], flags["--role"], flags["--instance"]) == ("ds", "unified", "$(POD_NAME)")
    assert flags["--model-config"] == "/models/DeepSeek-V3/config.json" and flags["--gpus-per-node"] == "8"
    assert env_of(sidecar)["MOECTL_AGENT_TOKEN"] == token and env_of(sidecar)["MOECTL_VLLM_TOKEN"] == token
    mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in (vllm, sidecar)}
    assert mounts["vllm"]["state"] == "/moectl" and mounts["vllm"]["model"] == mounts["moectl-adapter"]["model"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "deepseek-v3-weights", "readOnly": True}
    assert pod["automountServiceAccountToken"] is False  # neither container calls the Kubernetes API
    [target] = scale_targets(objects)
    assert (target.deployment, target.role, target.kind, target.name) == ("ds", "unified", "Deployment", NAME)
    rules = one(objects, "Role", f"{RELEASE}-scaler")["rules"]
    named = [(r["resources"], sorted(r["verbs"])) for r in rules if r.get("resourceNames") == [NAME]]
    assert named == [(["deployments/scale"], ["get", "patch"]), (["deployments"], ["get"])]
    assert not [r for r in rules if "deployments" in r["resources"] and r.get("resourceNames") != [NAME]]


def test_render_without_a_claim_says_what_to_set(kube_cluster):
    done = kube_cluster.run_helm("template", RELEASE, str(CHART), "--set", "vllm.enabled=true", check=False)
    assert done.returncode != 0 and "vllm.model.claim" in done.stderr


def test_installed_the_controller_sizes_the_vllm_pool_through_its_scale_and_nothing_else(kube_cluster,
                                                                                          kube_namespace):
    targets = scale_targets(render(kube_cluster, "-f", str(VALUES), namespace=kube_namespace))
    kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace, "-f", str(VALUES), "--no-hooks")
    with kube_cluster.api_client() as admin:
        core, apps = CoreV1Api(admin), AppsV1Api(admin)
        until("the vLLM pool's pod (made by the controller-manager; it never runs)", lambda: core.list_namespaced_pod(
            kube_namespace, label_selector=SELECTOR).items, timeout=60)
        with kube_cluster.service_account_client(kube_namespace, RELEASE) as client:
            scaler = KubeScaler(client, targets, default_namespace=kube_namespace, field_manager="moectl",
                                reporting_instance="test-replica")
            assert scaler.read(POOL).replicas == 1
            scaler.set_replicas(POOL, 2, expected=1, fence=SOLE)
            assert apps.read_namespaced_deployment(NAME, kube_namespace).spec.replicas == 2
            until("the second vLLM pod", lambda: len(core.list_namespaced_pod(
                kube_namespace, label_selector=SELECTOR).items) == 2, timeout=60)
            assert scaler.read(POOL).replicas == 2
            as_apps = AppsV1Api(client)
            refused = {
                "patching the pool, not its scale": lambda: status_of(lambda: as_apps.patch_namespaced_deployment(
                    NAME, kube_namespace, {"spec": {"replicas": 3}})),
                "deleting the pool": lambda: status_of(lambda: as_apps.delete_namespaced_deployment(
                    NAME, kube_namespace)),
                "the scale of the controller's own Deployment": lambda: status_of(
                    lambda: as_apps.patch_namespaced_deployment_scale(RELEASE, kube_namespace,
                                                                      {"spec": {"replicas": 3}})),
            }
            assert {what: check() for what, check in refused.items()} == {what: 403 for what in refused}
    kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace)
