"""The LeaderWorkerSet controller itself (sigs.k8s.io/lws@v0.9.0, built by support/kube/build.py) beside the test
apiserver: `running_lws_controller(cluster, namespace)`.

It makes each group's leader StatefulSet, leader pods, worker StatefulSets and pods, and writes the LWS status;
its webhooks default and validate LeaderWorkerSets and label the pods (group index, worker index), which the
controller relies on. The apiserver calls them over TLS: here at a local endpoint (`https://127.0.0.1:<port>`)
with a self-signed certificate as their caBundle, registered from the module's own webhook manifests with the
service reference replaced by that URL and the pod hooks limited to the test's namespace. Its own certificate
management (for an in-cluster Service) and leader election are off; it runs as the cluster's admin.
"""

from __future__ import annotations

import base64
import logging
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import yaml
from kubernetes.client import AdmissionregistrationV1Api, ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from support.kube import build
from support.kube.client import KubeCluster
from support.kube.cluster import _spawn, _wait_until
from support.kube.crds import module_dir
from support.kube.pki import make_serving_cert
from support.servers import free_port, until

log = logging.getLogger("tests.kube.lws")
NAMESPACE_NAME = "kubernetes.io/metadata.name"
HOOKED = ("leaderworkerset.x-k8s.io", "")  # API groups of the hooks registered (not DisaggregatedSet's)


_PROBE = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "probe"},
          "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {
              "spec": {"containers": [{"name": "probe", "image": "registry.invalid/none:0"}]}}}}}


def _config(cert_dir: str, webhook_port: int, probe_port: int) -> dict:
    return {"apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": cert_dir},
            "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            "clientConnection": {"qps": 200, "burst": 400}}


def _hooks(webhook_port: int, ca_bundle: bytes, namespace: str) -> list[dict]:
    """The module's webhook configurations, pointed at the local endpoint."""
    path = module_dir(build.LWS[0], build.LWS[1]) / "config" / "webhook" / "manifests.yaml"
    out = []
    for document in yaml.safe_load_all(path.read_text()):
        if not document:
            continue
        document["metadata"]["name"] = f"lws-{namespace}-{document['kind'].lower()}"
        hooks = [h for h in document["webhooks"] if h["rules"][0]["apiGroups"][0] in HOOKED]
        for hook in hooks:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{service['path']}",
                                    "caBundle": base64.b64encode(ca_bundle).decode()}
            hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME: namespace}}
        document["webhooks"] = hooks
        out.append(document)
    return out


@contextmanager
def running_lws_controller(cluster: KubeCluster, admin: ApiClient, namespace: str) -> Iterator[None]:
    """The controller and its webhooks for LeaderWorkerSets in `namespace`, until the context exits (the LWS CRD
    installed first)."""
    workdir = cluster.workdir / "lws"
    cert_dir = workdir / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    serving = make_serving_cert(workdir)
    shutil.copy(serving.cert, cert_dir / "tls.crt")
    shutil.copy(serving.key, cert_dir / "tls.key")
    webhook_port, probe_port = free_port(), free_port()
    config = workdir / "config.yaml"
    config.write_text(yaml.safe_dump(_config(str(cert_dir), webhook_port, probe_port)))
    hooks = AdmissionregistrationV1Api(admin)
    with ExitStack() as stack:
        log = workdir / "lws-controller.log"
        process = _spawn(stack, [str(cluster.bin_dir / "lws-controller"), f"--config={config}",
                                 f"--kubeconfig={cluster.kubeconfig}", "--leader-elect=false",
                                 "--zap-log-level=info", "--zap-devel=false"], log)
        _wait_until(lambda: httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=5).status_code == 200,
                    "lws-controller", process, log)
        made = []
        for document in _hooks(webhook_port, serving.cert.read_bytes(), namespace):
            if document["kind"] == "MutatingWebhookConfiguration":
                hooks.create_mutating_webhook_configuration(document)
            else:
                hooks.create_validating_webhook_configuration(document)
            made.append((document["kind"], document["metadata"]["name"]))
        # the apiserver reads webhook configurations asynchronously: until it calls these, a LeaderWorkerSet
        # would be stored undefaulted and its pods unlabelled
        objects = CustomObjectsApi(admin)

        def is_defaulted() -> bool:
            try:
                return "networkConfig" in objects.create_namespaced_custom_object(
                    "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", _PROBE, dry_run="All")["spec"]
            except ApiException as error:  # called, but not reachable yet: failurePolicy Fail
                log.info("LeaderWorkerSet webhooks not answering yet: %s", error.reason)
                return False

        until("the apiserver to call the LeaderWorkerSet webhooks", is_defaulted, 30, interval=0.2)
        try:
            yield
        finally:
            for kind, name in made:
                if kind == "MutatingWebhookConfiguration":
                    hooks.delete_mutating_webhook_configuration(name)
                else:
                    hooks.delete_validating_webhook_configuration(name)
