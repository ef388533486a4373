"""A real Kubernetes control plane on loopback, the way controller-runtime's envtest runs one: etcd,
kube-apiserver (RBAC, self-signed serving certificate, service-account token signing) and
kube-controller-manager, with no kubelet and no scheduler (pods are stored, never run).

`running_cluster(bin_dir)` starts the three processes on free ports in a temp dir, waits until the
apiserver's /readyz answers and the controllers act, yields a `KubeCluster`, and on exit stops them and
removes the dir. Children die with the Python process even when it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from support.kube.client import KubeCluster
from support.kube.pki import ClientCert, make_ca, make_client_cert, make_service_account_key
from support.processes import die_with_parent, stop
from support.servers import free_port

ADMIN_USER = "moectl-test-admin"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
# deployment -> replicaset, statefulset and the garbage collector for workloads; serviceaccount(-token) and
# root-ca-cert-publisher give namespaces what pods expect; namespace deletion; clusterrole-aggregation fills
# the admin/edit/view roles that charts bind to; persistentvolumeclaim-protection lets a deleted claim go (the
# apiserver's admission puts its finalizer on every claim)
DEFAULT_CONTROLLERS = (
    "deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller",
    "job-controller", "garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
    "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller", "persistentvolumeclaim-protection-controller",
)
START_TIMEOUT_S = 180.0  # a cold apiserver on 2 busy cores takes tens of seconds


def _spawn(stack: ExitStack, argv: list[str], log: Path) -> subprocess.Popen:
    # a session of its own: a signal meant for the test run's process group (a terminal's Ctrl-C, a runner
    # stopping a step) must not take the cluster from under the tests; the fixture stops it, in order, and
    # PR_SET_PDEATHSIG if the run itself is killed
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent, start_new_session=True)
    stack.callback(stop, process)
    return process


def _wait_until(is_ready: Callable[[], bool], what: str, process: subprocess.Popen, log: Path) -> float:
    """Polls `is_ready` until true; returns seconds waited. Fails with the log's tail if the process exits."""
    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT_S:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_tail(log)}")
        try:
            if is_ready():
                return time.monotonic() - started
        except (httpx.HTTPError, OSError, ValueError):  # not listening yet, or half-started
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready within {START_TIMEOUT_S:.0f}s:\n{_tail(log)}")


def _tail(log: Path, num_lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-num_lines:])


def tls_context(ca_file: Path, client: ClientCert) -> ssl.SSLContext:
    """Verifies the apiserver with `ca_file` and presents `client`'s certificate."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.load_cert_chain(str(client.cert), str(client.key))
    return context


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, client: ClientCert) -> Path:
    """A kubeconfig (JSON is valid YAML) with one cluster, one user and a current context."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": user, "preferences": {},
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def _start_etcd(stack: ExitStack, bin_dir: Path, workdir: Path) -> tuple[str, subprocess.Popen, float]:
    client_url, peer_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    log = workdir / "etcd.log"
    process = _spawn(stack, [
        str(bin_dir / "etcd"), "--name=test", f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=test={peer_url}", "--unsafe-no-fsync", "--log-level=warn",
    ], log)
    waited = _wait_until(lambda: httpx.get(f"{client_url}/health", timeout=2).json().get("health") == "true",
                         "etcd", process, log)
    return client_url, process, waited


def _start_apiserver(stack: ExitStack, bin_dir: Path, workdir: Path, etcd_url: str, client_ca: ClientCert,
                     admin: ClientCert, sa_key: Path, sa_pub: Path) -> tuple[str, Path, subprocess.Popen, float]:
    """Returns (server URL, serving CA bundle, the process, seconds to /readyz)."""
    port, cert_dir, log = free_port(), workdir / "apiserver-certs", workdir / "kube-apiserver.log"
    process = _spawn(stack, [
        str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={cert_dir}", f"--client-ca-file={client_ca.cert}", "--authorization-mode=RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}", f"--service-account-key-file={sa_pub}",
        f"--service-account-signing-key-file={sa_key}", f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # no endpoints for the `kubernetes` Service: it refuses a loopback address, and nothing here dials it
        "--endpoint-reconciler-type=none", "--profiling=false", "--v=1",
    ], log)
    server, ca_bundle = f"https://127.0.0.1:{port}", cert_dir / "apiserver.crt"

    def is_ready() -> bool:
        # the serving certificate (with its CA) appears under --cert-dir early in start-up
        return ca_bundle.is_file() and httpx.get(f"{server}/readyz", verify=tls_context(ca_bundle, admin),
                                                 timeout=5).status_code == 200

    return server, ca_bundle, process, _wait_until(is_ready, "kube-apiserver", process, log)


def _start_controller_manager(stack: ExitStack, bin_dir: Path, workdir: Path, kubeconfig: Path,
                              admin: httpx.Client, sa_key: Path, root_ca: Path, controllers: tuple[str, ...],
                              extra_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen, float]:
    """Returns the process and seconds until its controllers act: /healthz answers and the serviceaccount
    controller has made the `default` namespace's ServiceAccount."""
    port, log = free_port(), workdir / "kube-controller-manager.log"
    process = _spawn(stack, [
        str(bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(controllers)}", "--use-service-account-credentials=true",
        f"--service-account-private-key-file={sa_key}", f"--root-ca-file={root_ca}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={workdir / 'kcm-certs'}",
        "--leader-elect=false", "--profiling=false", "--v=1", *extra_args,
    ], log)

    def is_ready() -> bool:
        # a self-signed certificate it made for itself under --cert-dir; only its health matters here
        healthy = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=5).status_code == 200
        return healthy and admin.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200

    return process, _wait_until(is_ready, "kube-controller-manager", process, log)


@contextmanager
def running_cluster(bin_dir: Path, controllers: tuple[str, ...] = DEFAULT_CONTROLLERS,
                    controller_manager_args: tuple[str, ...] = ()) -> Iterator[KubeCluster]:
    """etcd + kube-apiserver + kube-controller-manager (with `controller_manager_args`) from `bin_dir`, up until
    the context exits."""
    workdir = Path(tempfile.mkdtemp(prefix="moectl-kube-"))
    try:
        with ExitStack() as stack:  # unwinds in reverse: controller-manager, apiserver, etcd
            pki_dir = workdir / "pki"
            pki_dir.mkdir()
            client_ca = make_ca(pki_dir)
            admin = make_client_cert(client_ca, pki_dir, ADMIN_USER, groups=("system:masters",))
            kcm_cert = make_client_cert(client_ca, pki_dir, "system:kube-controller-manager")
            sa_key, sa_pub = make_service_account_key(pki_dir)

            etcd_url, etcd, etcd_s = _start_etcd(stack, bin_dir, workdir)
            server, ca_bundle, apiserver, apiserver_s = _start_apiserver(stack, bin_dir, workdir, etcd_url,
                                                                         client_ca, admin, sa_key, sa_pub)
            kubeconfig = write_kubeconfig(workdir / "admin.kubeconfig", server, ca_bundle, ADMIN_USER, admin)
            kcm_kubeconfig = write_kubeconfig(workdir / "kcm.kubeconfig", server, ca_bundle,
                                              "system:kube-controller-manager", kcm_cert)
            with httpx.Client(base_url=server, verify=tls_context(ca_bundle, admin)) as api:
                kcm, kcm_s = _start_controller_manager(stack, bin_dir, workdir, kcm_kubeconfig, api, sa_key,
                                                       ca_bundle, controllers, controller_manager_args)
            yield KubeCluster(
                workdir=workdir, server=server, kubeconfig=kubeconfig, ca_file=ca_bundle, bin_dir=bin_dir,
                startup_seconds={"etcd": etcd_s, "kube-apiserver": apiserver_s, "kube-controller-manager": kcm_s},
                processes={"etcd": etcd, "kube-apiserver": apiserver, "kube-controller-manager": kcm},
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
