"""A test's namespace comes with what the controller-manager gives every namespace, even when the
controller-manager is slow to give it (a test that lists the namespace before and after relies on it)."""

from __future__ import annotations

import os
import signal
import threading
import time

import kubernetes
from support.chart import stored
from support.kube.fixture import fresh_namespace

EVERY_NAMESPACE = {"ServiceAccount": {"default"}, "ConfigMap": {"kube-root-ca.crt"}}
PAUSE_S = 3.0


def test_a_namespace_is_handed_over_only_once_the_controller_manager_has_filled_it(kube_cluster):
    controller_manager = kube_cluster.processes["kube-controller-manager"]
    os.kill(controller_manager.pid, signal.SIGSTOP)  # what a busy machine does to it, for PAUSE_S
    resume = threading.Timer(PAUSE_S, os.kill, (controller_manager.pid, signal.SIGCONT))
    resume.start()
    try:
        started = time.monotonic()
        with fresh_namespace(kube_cluster) as name, kube_cluster.api_client() as admin:
            waited = time.monotonic() - started
            assert stored(admin, name, [("v1", "ServiceAccount"), ("v1", "ConfigMap")]) == EVERY_NAMESPACE
    finally:
        resume.join()
    assert waited >= PAUSE_S * 0.9  # it waited for the paused controller-manager rather than handing it over bare
    with kube_cluster.api_client() as admin:
        namespace = kubernetes.client.CoreV1Api(admin).read_namespace(name)
        assert namespace.status.phase == "Terminating" or namespace.metadata.deletion_timestamp is not None
