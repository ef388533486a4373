"""Asking the platform to restart an SGLang group so it loads a new `--init-expert-location` file.

SGLang 0.5.23 has no request that replaces its expert map while it serves (its request types are START, STOP
and DUMP, in `srt/eplb/expert_distribution.py`). So a placement change is a restart of the group.
`CommandRestart` runs a command the operator gives (systemctl, docker restart, a script).
`KubeEvictRestart` evicts the group's pods through the Eviction API, which the API server refuses (429) while it
would break the pool's PodDisruptionBudget. With the chart's budget (maxUnavailable 1) one group restarts at a
time. The placement lives in a ConfigMap mounted into the pod (`KubeConfigMapStore`), which outlives it.
"""

from __future__ import annotations

import logging
import subprocess
from typing import Protocol

from agents.adapters.sglang.placement_store import StoredPlacement, decode, encode

log = logging.getLogger("moectl.adapter.sglang")


class Restarter(Protocol):
    def restart(self) -> bool:
        """True when the restart was accepted; False when it must wait (a disruption budget said no)."""
        ...


class CommandRestart:
    """The operator's command, given `timeout_seconds` to finish; one that is missing, fails or hangs is a restart
    not done (False, logged): the sidecar goes on and tries again at the next placement."""

    def __init__(self, argv: list[str], timeout_seconds: float = 300.0):
        self.argv, self.timeout_seconds = argv, timeout_seconds

    def restart(self) -> bool:
        try:
            done = subprocess.run(self.argv, check=False, timeout=self.timeout_seconds)
        except subprocess.TimeoutExpired:
            log.error("restart command %s did not finish in %.0f s: killed", self.argv, self.timeout_seconds)
            return False
        except OSError as exc:
            log.error("restart command %s cannot run: %s (is it installed? see --restart-command)", self.argv, exc)
            return False
        if done.returncode != 0:
            log.error("restart command %s exited %d", self.argv, done.returncode)
        return done.returncode == 0


class KubeEvictRestart:
    def __init__(self, core_api, namespace: str, label_selector: str):  # noqa: ANN001 (kubernetes.client.CoreV1Api)
        self.core, self.namespace, self.selector = core_api, namespace, label_selector

    def restart(self) -> bool:
        from kubernetes.client import V1DeleteOptions, V1Eviction, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        for pod in pods:
            body = V1Eviction(metadata=V1ObjectMeta(name=pod.metadata.name, namespace=self.namespace),
                              delete_options=V1DeleteOptions(grace_period_seconds=30))
            try:
                self.core.create_namespaced_pod_eviction(pod.metadata.name, self.namespace, body)
            except ApiException as exc:
                if exc.status == 429:  # the PodDisruptionBudget allows no disruption now: try next window
                    return False
                if exc.status != 404:
                    raise
        return bool(pods)


class KubeConfigMapStore:
    """The placement and its meta as two keys of one ConfigMap (created by the chart, written here)."""

    def __init__(self, core_api, namespace: str, name: str):  # noqa: ANN001
        self.core, self.namespace, self.name = core_api, namespace, name

    def read(self) -> StoredPlacement | None:
        return decode(self.core.read_namespaced_config_map(self.name, self.namespace).data or {})

    def write(self, placement: StoredPlacement) -> None:
        self.core.patch_namespaced_config_map(self.name, self.namespace, {"data": encode(placement)})
