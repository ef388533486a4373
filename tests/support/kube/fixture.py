"""pytest plugin (tests/conftest.py loads it): the session's test cluster and a namespace per test.

Any test that uses `kube_cluster` (directly or through `kube_namespace`) is marked `kube` and `slow`, so
`-m 'not slow'` and `-m 'not kube'` leave it out. Binaries not built: skip saying how to build them, or
fail under CI=true, where `make test` builds them first.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from support.kube import build
from support.kube.client import KubeCluster
from support.kube.cluster import running_cluster


def require_built() -> Path:
    """The cache dir holding the binaries that `make test` builds; otherwise skip (or fail under CI=true)."""
    bin_dir = build.bin_dir()
    missing = [b.name for b in build.binaries() if not b.is_opt_in and not build.is_cached(bin_dir, b)]
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


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    with running_cluster(require_built()) as cluster:
        yield cluster


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted after it (the namespace controller empties it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    with kube_cluster.api_client() as admin:
        core = kubernetes.client.CoreV1Api(admin)
        core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name)))
        yield name
        core.delete_namespace(name)
