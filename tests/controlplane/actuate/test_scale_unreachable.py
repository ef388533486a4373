"""A pool's platform out of reach (the apiserver down) holds back its size only: the decision is recorded as
usual, and the scaler applies it on a later pass."""

from __future__ import annotations

import kubernetes
from support.scaling import ScaledDeployment
from support.servers import free_port

from controlplane.actuate.kube import KubeScaler
from controlplane.config import KubeScaleTarget


def test_an_unreachable_apiserver_holds_back_the_size_only(tmp_path, caplog):
    config = kubernetes.client.Configuration()
    config.host = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    config.retries = 0
    with kubernetes.client.ApiClient(config) as client:
        scaler = KubeScaler(client, [KubeScaleTarget(deployment="tiny", role="decode", kind="Deployment",
                                                     name="decode")],
                            default_namespace="serving", field_manager="moectl", reporting_instance="test")
        pools = ScaledDeployment.create(f"sqlite:///{tmp_path / 'moectl.db'}", scaler)
        request = pools.reconcile("decode", replicas=3)
    [action] = pools.actions("decode")
    assert request.outcome == f"action {action.id} applied" and action.version == 1
    assert "replicas_applied" not in action.measured
    assert "tiny/decode: could not bring the pool to its size; retrying next pass" in caplog.text
