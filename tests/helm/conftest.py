"""CRDs the chart's tests need in the session's test cluster (support.kube.crds), installed once."""

from __future__ import annotations

import pytest
from support.kube.crds import POOL_CRD, install_crds, prometheus_operator_crds


@pytest.fixture(scope="session")
def monitoring_crds(kube_cluster) -> None:
    """ServiceMonitor, PodMonitor and PrometheusRule, as prometheus-operator (and kube-prometheus-stack) define them."""
    with kube_cluster.api_client() as admin:
        install_crds(admin, prometheus_operator_crds())


@pytest.fixture(scope="session")
def pool_crd(kube_cluster) -> None:
    """test.moectl.dev/v1 Pool: a custom workload with a scale subresource."""
    with kube_cluster.api_client() as admin:
        install_crds(admin, [POOL_CRD])
