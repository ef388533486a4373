"""The one thing a kubelet does that tests of hook Jobs need: run a Pod's container to completion and report it.

The test cluster has no kubelet, so a Job's Pod stays Pending and `helm install` waits on its hooks forever.
`run_pod_here` plays the kubelet for one single-container Pod whose image is this checkout: it runs the
container's command and args as a local process, with the env the Pod declares (literal values, Secret keys
and the Pod's own fields resolved through the API), then writes the Pod's terminal status as a kubelet would:
phase Succeeded or Failed and the container's exit code. The Job controller and helm take it from there.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from datetime import UTC, datetime

from kubernetes.client import CoreV1Api, V1Pod

# the image's entry point is the `moectl` console script; here it is this checkout's package
COMMANDS = {"moectl": [sys.executable, "-m", "controlplane"]}


def pod_env(core: CoreV1Api, pod: V1Pod) -> dict[str, str]:
    """The container's env as the kubelet would resolve it (value, secretKeyRef, metadata fieldRef)."""
    namespace, env = pod.metadata.namespace, {}
    for var in pod.spec.containers[0].env or []:
        source = var.value_from
        if source is None:
            env[var.name] = var.value or ""
        elif source.secret_key_ref is not None:
            secret = core.read_namespaced_secret(source.secret_key_ref.name, namespace)
            env[var.name] = base64.b64decode(secret.data[source.secret_key_ref.key]).decode()
        elif source.field_ref is not None:
            field = source.field_ref.field_path.removeprefix("metadata.")
            env[var.name] = getattr(pod.metadata, field)
        else:
            raise NotImplementedError(f"env {var.name}: only value, secretKeyRef and fieldRef are resolved here")
    return env


def run_pod_here(core: CoreV1Api, pod: V1Pod, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs the Pod's container locally, records the outcome in the Pod's status, returns the process."""
    [container] = pod.spec.containers
    command, *rest = [*(container.command or []), *(container.args or [])]
    started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    done = subprocess.run([*COMMANDS[command], *rest], env={**os.environ, **pod_env(core, pod)},
                          capture_output=True, text=True, timeout=timeout)
    finished = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    terminated = {"exitCode": done.returncode, "reason": "Completed" if done.returncode == 0 else "Error",
                  "startedAt": started, "finishedAt": finished}
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {
        "phase": "Succeeded" if done.returncode == 0 else "Failed", "startTime": started,
        "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "", "ready": False,
                               "restartCount": 0, "state": {"terminated": terminated}}],
    }})
    return done
