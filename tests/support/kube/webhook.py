"""A local admission webhook endpoint for the test apiserver: HTTPS on 127.0.0.1 with a self-signed certificate
(which is its caBundle), registered as a ValidatingWebhookConfiguration for the given rules in one namespace. It
hands every AdmissionReview's request to the test's callback, then allows it (failurePolicy Ignore: a hook that is
gone never blocks the apiserver). A test uses it to act at an exact point of a client's sequence of requests: the
apiserver calls it while that client's request waits."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes
from kubernetes.client import AdmissionregistrationV1Api, EventsV1Api

from support.kube.client import KubeCluster
from support.kube.pki import make_serving_cert

NAMESPACE_NAME = "kubernetes.io/metadata.name"


def _handler(on_review: Callable[[dict], None]) -> type[BaseHTTPRequestHandler]:
    class Review(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review.get("request") or {}
            on_review(request)
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": request.get("uid", ""), "allowed": True}}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (ssl.SSLError, ConnectionError):
                pass  # the apiserver stopped waiting: the request it asked about was dropped (its client killed)

        def log_message(self, *args) -> None:  # the test's output, not the server's
            pass

    return Review


@contextmanager
def admission_hook(cluster: KubeCluster, workdir: Path, namespace: str,
                   rules: list[kubernetes.client.V1RuleWithOperations],
                   on_review: Callable[[dict], None]) -> Iterator[None]:
    """Calls `on_review(request)` for every admission request matching `rules` in `namespace` until the context
    exits; returns once the apiserver calls it (its webhook configurations are read asynchronously)."""
    seen_probe = threading.Event()
    probe = f"probe-{uuid.uuid4().hex[:8]}"

    def review(request: dict) -> None:
        if (request.get("name") or (request.get("object") or {}).get("metadata", {}).get("name", "")).startswith(
                probe):
            seen_probe.set()
            return
        on_review(request)

    cert = make_serving_cert(workdir)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(review))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="admission-hook", daemon=True)
    thread.start()
    name = f"moectl-test-{uuid.uuid4().hex[:8]}"
    with cluster.api_client() as admin:
        hooks = AdmissionregistrationV1Api(admin)
        hooks.create_validating_webhook_configuration(kubernetes.client.V1ValidatingWebhookConfiguration(
            metadata=kubernetes.client.V1ObjectMeta(name=name),
            webhooks=[kubernetes.client.V1ValidatingWebhook(
                name=f"{name}.moectl.test", rules=rules, side_effects="None", admission_review_versions=["v1"],
                failure_policy="Ignore", timeout_seconds=30,
                namespace_selector=kubernetes.client.V1LabelSelector(match_labels={NAMESPACE_NAME: namespace}),
                client_config=kubernetes.client.AdmissionregistrationV1WebhookClientConfig(
                    url=f"https://127.0.0.1:{server.server_address[1]}/validate",
                    ca_bundle=base64.b64encode(cert.cert.read_bytes()).decode()))]))
        try:
            events = EventsV1Api(admin)
            for attempt in range(60):  # until the apiserver calls it: an Event named as the probe, each try
                _probe_event(events, namespace, f"{probe}-{attempt}")
                if seen_probe.wait(0.5):
                    break
            else:
                raise RuntimeError(f"the apiserver never called the admission hook at {server.server_address}")
            yield
        finally:
            hooks.delete_validating_webhook_configuration(name)
            server.shutdown()
            server.server_close()


def _probe_event(events: EventsV1Api, namespace: str, name: str) -> None:
    events.create_namespaced_event(namespace, kubernetes.client.EventsV1Event(
        metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace), event_time=datetime.now(UTC),
        reporting_controller="moectl.io/test", reporting_instance="probe", action="Probe", reason="Probe",
        type="Normal", regarding=kubernetes.client.V1ObjectReference(kind="ConfigMap", name=name, namespace=namespace)))
