"""The chart installs into the real apiserver for every ci values file (the apiserver, with prometheus-operator's
own CRDs, accepts every object), upgrades keep the generated tokens, the migration hook runs before the
controller, and `helm uninstall` leaves nothing behind but the SQLite volume it is told to keep."""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor

import kubernetes
import pytest
import yaml
from kubernetes.client import AppsV1Api, BatchV1Api, CoreV1Api
from sqlalchemy import create_engine, text
from support import servers
from support.chart import CHART, CI_VALUES, DERIVED_KINDS, RELEASE, read_back, render, stored, until_stored
from support.kube.kubelet import run_pod_here
from support.kube.objects import status_of
from support.servers import until

pytestmark = [pytest.mark.kube, pytest.mark.slow]
meta = kubernetes.client.V1ObjectMeta


_server_to_kinds: dict[str, list[tuple[str, str]]] = {}  # rendered once per test cluster


@pytest.fixture
def chart_kinds(kube_cluster, monitoring_crds) -> list[tuple[str, str]]:
    """Every namespaced (apiVersion, kind) the chart makes under any ci values, and what installs derive (the
    monitoring kinds are served once their CRDs are in)."""
    if kube_cluster.server not in _server_to_kinds:
        kinds = {(o["apiVersion"], o["kind"]) for values in CI_VALUES for o in render(kube_cluster, "-f", str(values))}
        _server_to_kinds[kube_cluster.server] = sorted(kinds | set(DERIVED_KINDS))
    return _server_to_kinds[kube_cluster.server]


def make_secret(core: CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(namespace, kubernetes.client.V1Secret(metadata=meta(name=name), string_data=data))


def user_secrets(core: CoreV1Api, namespace: str, database_url: str) -> None:
    """What a user makes before installing with the postgres ci values."""
    make_secret(core, namespace, "moectl-database", {"url": database_url, "database-url": database_url})
    make_secret(core, namespace, "moectl-bootstrap-tokens", {"api-token": "a" * 32, "agent-token": "b" * 32,
                                                   "alerts-token": "c" * 32})


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_install_is_accepted_and_uninstall_leaves_nothing(kube_cluster, kube_namespace, chart_kinds, values):
    with kube_cluster.api_client() as admin:
        core = CoreV1Api(admin)
        user_secrets(core, kube_namespace, "postgresql+psycopg://moectl@postgres.invalid/moectl")
        before = stored(admin, kube_namespace, chart_kinds)

        # --no-hooks: the migration Job's pod would never run here (test_migration_hook_... runs it)
        kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace, "-f", str(values), "--no-hooks")
        manifest = kube_cluster.run_helm("get", "manifest", RELEASE, "-n", kube_namespace).stdout
        objects = render(kube_cluster, "-f", str(values), "--skip-tests", namespace=kube_namespace)
        assert {(o["kind"], o["metadata"]["name"]) for o in objects if not o["kind"] == "Job"} == {
            (o["kind"], o["metadata"]["name"]) for o in yaml.safe_load_all(manifest) if o}
        for obj in objects:
            if obj["kind"] == "Job":  # a hook: not made with --no-hooks
                assert status_of(lambda obj=obj: read_back(admin, obj, kube_namespace)) == 404
                continue
            accepted = read_back(admin, obj, kube_namespace)
            assert accepted["metadata"]["labels"] == obj["metadata"]["labels"]
            if obj["kind"] in ("Deployment", "StatefulSet") and "replicas" not in obj["spec"]:
                assert accepted["spec"]["replicas"] == 1  # the apiserver's default, until the controller sets it

        kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace, "--wait", "--timeout", "60s")
        kept = {"PersistentVolumeClaim": {f"{RELEASE}-data"}} if any(
            o["kind"] == "PersistentVolumeClaim" for o in objects) else {}
        expected = {kind: names | kept.get(kind, set()) for kind, names in before.items()}
        until_stored(kube_cluster, admin, kube_namespace, chart_kinds, expected, 60)


def test_a_kept_volume_is_adopted_by_a_reinstall_and_goes_once_not_kept(kube_cluster, kube_namespace, chart_kinds):
    with kube_cluster.api_client() as admin:
        core = CoreV1Api(admin)
        before = stored(admin, kube_namespace, chart_kinds)

        def claim() -> kubernetes.client.V1PersistentVolumeClaim:
            return core.read_namespaced_persistent_volume_claim(f"{RELEASE}-data", kube_namespace)

        kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace)
        uid = claim().metadata.uid
        kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace, "--wait", "--timeout", "60s")
        assert claim().metadata.uid == uid

        kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace)
        assert claim().metadata.uid == uid  # the same volume, so the same database
        # an upgrade drops the annotation (an install that adopts the claim would not remove it)
        kube_cluster.run_helm("upgrade", RELEASE, str(CHART), "-n", kube_namespace, "--set",
                              "database.sqlite.persistence.keepOnUninstall=false")
        assert "helm.sh/resource-policy" not in claim().metadata.annotations
        kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace, "--wait", "--timeout", "60s")
        until_stored(kube_cluster, admin, kube_namespace, chart_kinds, before, 60)


def test_upgrade_keeps_the_generated_tokens(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        core, apps = CoreV1Api(admin), AppsV1Api(admin)
        kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace)
        tokens = core.read_namespaced_secret(f"{RELEASE}-tokens", kube_namespace).data
        assert len({base64.b64decode(v) for v in tokens.values()}) == 3

        kube_cluster.run_helm("upgrade", RELEASE, str(CHART), "-n", kube_namespace, "--reuse-values",
                              "--set", "controller.settings.windowSeconds=7")
        assert core.read_namespaced_secret(f"{RELEASE}-tokens", kube_namespace).data == tokens
        [container] = apps.read_namespaced_deployment(RELEASE, kube_namespace).spec.template.spec.containers
        assert {e.name: e.value for e in container.env}["MOECTL_WINDOW_SECONDS"] == "7"
        kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace, "--wait", "--timeout", "60s")


def test_an_install_the_schema_refuses_makes_nothing(kube_cluster, kube_namespace):
    done = kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", kube_namespace, "--set",
                                 "controller.replicas=many", check=False)
    assert done.returncode != 0 and "/controller/replicas" in done.stderr
    assert json.loads(kube_cluster.run_helm("list", "-n", kube_namespace, "-a", "-o", "json").stdout) == []
    with kube_cluster.api_client() as admin:
        assert AppsV1Api(admin).list_namespaced_deployment(kube_namespace).items == []


@pytest.mark.postgres
def test_migration_hook_migrates_postgres_before_the_controller_exists(kube_cluster, kube_namespace,
                                                                       postgres_server, tmp_path):
    socket_dir, port = postgres_server
    database_url = servers.create_database(socket_dir, port, f"h{kube_namespace.replace('-', '')}")
    with kube_cluster.api_client() as admin, ThreadPoolExecutor(1) as background:
        core, apps, batch = CoreV1Api(admin), AppsV1Api(admin), BatchV1Api(admin)
        user_secrets(core, kube_namespace, database_url)
        install = background.submit(kube_cluster.run_helm, "install", RELEASE, str(CHART), "-n", kube_namespace,
                                    "-f", str(CHART / "ci" / "postgres-ha-values.yaml"), "--timeout", "120s")

        job = until("the pre-install hook Job", lambda: batch.list_namespaced_job(kube_namespace).items, 60)[0]
        assert job.metadata.name == f"{RELEASE}-migrate"
        assert apps.list_namespaced_deployment(kube_namespace).items == []  # hooks first, then the release
        [pod] = until("the Job's pod", lambda: core.list_namespaced_pod(
            kube_namespace, label_selector=f"job-name={RELEASE}-migrate").items, 60)
        ran = run_pod_here(core, pod)
        assert ran.returncode == 0, ran.stdout + ran.stderr

        install.result(timeout=150)  # helm saw the Job complete and installed the release
        engine = create_engine(database_url)
        with engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        engine.dispose()
        assert apps.read_namespaced_deployment(RELEASE, kube_namespace).spec.replicas == 2
        until("hook-succeeded to delete the Job",
              lambda: status_of(lambda: batch.read_namespaced_job(f"{RELEASE}-migrate", kube_namespace)) == 404, 60)
        kube_cluster.run_helm("uninstall", RELEASE, "-n", kube_namespace, "--wait", "--timeout", "60s")
