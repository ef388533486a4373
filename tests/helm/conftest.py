"""CRDs the chart's tests need in the test cluster (support.kube.crds), installed once per cluster."""

from __future__ import annotations

import pytest
from support.kube.crds import POOL_CRD, install_crds, prometheus_operator_crds


def _install(definitions: list[dict]):
    def setup(cluster) -> None:
        with cluster.api_client() as admin:
            install_crds(admin, definitions)
    return setup


@pytest.fixture
def monitoring_crds(kube_cluster_keeper, kube_cluster) -> None:
    """ServiceMonitor, PodMonitor and PrometheusRule, as prometheus-operator (and kube-prometheus-stack) define them."""
    kube_cluster_keeper.once("monitoring-crds", _install(prometheus_operator_crds()))


@pytest.fixture
def pool_crd(kube_cluster_keeper, kube_cluster) -> None:
    """test.moectl.dev/v1 Pool: a custom workload with a scale subresource."""
    kube_cluster_keeper.once("pool-crd", _install([POOL_CRD]))
