"""pytest plugin (tests/conftest.py loads it): the session's test cluster and a namespace per test.

The cluster starts on first use and is checked before every test that uses it: when a process of it died
(or the apiserver stopped answering), the test gets a fresh cluster, and a `KubeClusterDied` warning in
the run's output names the death (support/kube/health.py). Any test that uses `kube_cluster` (directly or
through `kube_namespace`) is marked `kube` and `slow`, so `-m 'not slow'` and `-m 'not kube'` leave it out.
Under xdist each worker that runs one has its own cluster (`make test`: two at most). Binaries not built:
skip saying how to build them, or fail under CI=true, where `make test` builds them first.
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import kubernetes
import pytest

from support.kube import build
from support.kube.client import KubeCluster
from support.kube.cluster import running_cluster
from support.kube.health import death
from support.servers import until

NAMESPACE_READY_S = 60.0


class KubeClusterDied(UserWarning):
    """The test cluster died between two tests and was replaced; the message says how it died."""


def require_built() -> Path:
    """The cache dir holding the binaries that `make test` builds; otherwise skip (or fail under CI=true)."""
    bin_dir = build.bin_dir()
    missing = [b.name for b in build.binaries() if not build.is_cached(bin_dir, b)]
    if shutil.which("openssl") is None:
        missing.append("openssl (the Debian package)")
    if not missing:
        return bin_dir
    message = f"test cluster not built ({', '.join(missing)} missing in {bin_dir}): run {build.BUILD_HINT}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kube)
            item.add_marker(pytest.mark.slow)


class ClusterKeeper:
    """The session's one test cluster: started on first use, replaced when `death` finds it cannot serve."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._cluster: KubeCluster | None = None
        self._done: set[str] = set()  # what `once` ran on this cluster

    def healthy(self) -> tuple[KubeCluster, str | None]:
        """(a cluster that serves, why the previous one was replaced or None)."""
        why = death(self._cluster) if self._cluster is not None else None
        if self._cluster is None or why is not None:
            self.close()
            self._cluster = self._stack.enter_context(running_cluster(require_built()))
        return self._cluster, why

    def once(self, what: str, setup: Callable[[KubeCluster], None]) -> None:
        """setup(cluster) the first time `what` is asked of the current cluster (a fresh one asks again)."""
        if what not in self._done:
            setup(self.healthy()[0])
            self._done.add(what)

    def close(self) -> None:
        self._cluster = None
        self._done.clear()
        self._stack.close()


@pytest.fixture(scope="session")
def kube_cluster_keeper() -> Iterator[ClusterKeeper]:
    keeper = ClusterKeeper()
    yield keeper
    keeper.close()


@pytest.fixture
def kube_cluster(kube_cluster_keeper: ClusterKeeper) -> KubeCluster:
    """The session's test cluster, checked alive and ready before this test."""
    cluster, why = kube_cluster_keeper.healthy()
    if why is not None:
        warnings.warn(KubeClusterDied(f"the test cluster died before this test and was replaced: {why}"),
                      stacklevel=1)
    return cluster


@contextmanager
def fresh_namespace(cluster: KubeCluster) -> Iterator[str]:
    """A new namespace, deleted on exit (the namespace controller empties it). It is handed over once the
    controller-manager has given it what every namespace gets (the `default` ServiceAccount and the
    kube-root-ca.crt ConfigMap): on busy cores that takes seconds, and a test that lists the namespace before
    and after would otherwise count them as its own."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    with cluster.api_client() as admin:
        core = kubernetes.client.CoreV1Api(admin)
        core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name)))
        until(f"the controller-manager to give namespace {name} its default ServiceAccount and root CA",
              lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
              and core.list_namespaced_config_map(name, field_selector="metadata.name=kube-root-ca.crt").items,
              NAMESPACE_READY_S)
        yield name
        core.delete_namespace(name)


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace for one test (`fresh_namespace`)."""
    with fresh_namespace(kube_cluster) as name:
        yield name
