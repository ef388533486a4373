"""What a test gets from the running test cluster: the admin kubeconfig, `kubernetes` clients (the admin, or
a ServiceAccount authenticated exactly as a pod would be: a TokenRequest token), and helm bound to it."""

from __future__ import annotations

import os
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import kubernetes


@dataclass(frozen=True)
class KubeCluster:
    """A started control plane (support.kube.cluster.running_cluster). `server` is https://127.0.0.1:port;
    `ca_file` verifies its serving certificate; `kubeconfig` authenticates as a system:masters admin."""

    workdir: Path
    server: str
    kubeconfig: Path
    ca_file: Path
    bin_dir: Path
    startup_seconds: dict[str, float] = field(default_factory=dict)  # per process, start to ready
    # etcd, kube-apiserver, kube-controller-manager: each logs to workdir/<name>.log
    processes: dict[str, subprocess.Popen] = field(default_factory=dict, compare=False, repr=False)

    @property
    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def log_tail(self, name: str, num_lines: int = 30) -> str:
        log = self.workdir / f"{name}.log"
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else ["(no log)"]
        return "\n".join(lines[-num_lines:])

    def http_client(self, timeout: float) -> httpx.Client:
        """Anonymous HTTPS to the apiserver (enough for /readyz and /version), its certificate verified."""
        return httpx.Client(base_url=self.server, verify=ssl.create_default_context(cafile=str(self.ca_file)),
                            timeout=timeout)

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    @property
    def kwok(self) -> Path | None:
        """Optional: None when it was not built."""
        path = self.bin_dir / "kwok"
        return path if path.is_file() else None

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new client authenticated as the admin (close it, or use it as a context manager)."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def service_account_token(self, namespace: str, name: str, expiration_seconds: int = 3600) -> str:
        """A bound token for ServiceAccount `namespace/name` from the TokenRequest API (what the kubelet
        projects into a pod); its audience is the apiserver's own."""
        request = kubernetes.client.AuthenticationV1TokenRequest(
            spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds))
        with self.api_client() as admin:
            answer = kubernetes.client.CoreV1Api(admin).create_namespaced_service_account_token(name, namespace,
                                                                                                request)
        return answer.status.token

    def service_account_client(self, namespace: str, name: str) -> kubernetes.client.ApiClient:
        """A new client authenticated as ServiceAccount `namespace/name` by a bearer token."""
        config = kubernetes.client.Configuration()
        config.host = self.server
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"authorization": self.service_account_token(namespace, name)}
        config.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.ApiClient(config)

    def run_helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`helm ARGS` against this cluster as the admin; helm's cache and config stay in the cluster's dir.
        With `check`, a non-zero exit fails with helm's stderr."""
        home = self.workdir / "helm"
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
        done = subprocess.run([str(self.helm), *args], env=env, capture_output=True, text=True, timeout=300)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done
