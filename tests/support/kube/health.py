"""Whether the running test cluster can serve the next test, and if not, why: which process died, how
(a signal, an exit code, the kernel's OOM killer, a port already taken), with the tail of its log."""

from __future__ import annotations

import signal
import subprocess
import time

import httpx

from support.kube.client import KubeCluster

READY_SECONDS = 30.0  # an apiserver on two loaded cores can stall for seconds; a dead one refuses at once


def death(cluster: KubeCluster) -> str | None:
    """None when every process of `cluster` runs and the apiserver answers /readyz; else what went wrong."""
    for name, process in cluster.processes.items():
        if process.poll() is not None:
            return f"{name} (pid {process.pid}) {how_it_ended(process.returncode)}{_oom(process.pid)}" \
                   f"{_port_taken(cluster, name)}; its log ends:\n{cluster.log_tail(name)}"
    error = _not_ready(cluster)
    if error is None:
        return None
    return f"kube-apiserver runs but /readyz did not answer within {READY_SECONDS:.0f}s ({error}); " \
           f"its log ends:\n{cluster.log_tail('kube-apiserver')}"


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def _not_ready(cluster: KubeCluster) -> str | None:
    deadline, error = time.monotonic() + READY_SECONDS, "no answer"
    with cluster.http_client(timeout=5) as api:
        while time.monotonic() < deadline:
            try:
                answer = api.get("/readyz")
                if answer.status_code == 200:
                    return None
                error = f"{answer.status_code}: {answer.text[-300:]}"
            except httpx.HTTPError as failed:
                error = repr(failed)
            time.sleep(0.5)
    return error


def _oom(pid: int) -> str:
    """The kernel's own words when its OOM killer chose `pid` (dmesg; nothing where it cannot be read)."""
    try:
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in kernel.splitlines() if f"Killed process {pid} " in line]
    return f" by the kernel's OOM killer ({lines[-1]})" if lines else ""


def _port_taken(cluster: KubeCluster, name: str) -> str:
    is_taken = "address already in use" in cluster.log_tail(name, num_lines=200).lower()
    return " (its port was already taken by another process)" if is_taken else ""
