"""Keys and certificates for a throwaway cluster, made with the `openssl` command (no Python dependency):
a client CA that the apiserver trusts (`--client-ca-file`), client certificates whose subject is the
Kubernetes identity (CN = user, O = groups), and the RSA key that signs service-account tokens.

The apiserver's serving certificate is not made here: it generates a self-signed one under `--cert-dir`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 2  # longer than any test session; the files are deleted with the cluster


@dataclass(frozen=True)
class ClientCert:
    """A client certificate and its key (PEM files) for one Kubernetes user."""

    cert: Path
    key: Path


def _run(*argv: str) -> None:
    subprocess.run(["openssl", *argv], check=True, capture_output=True)


def make_ca(directory: Path) -> ClientCert:
    """A self-signed CA; its certificate is the apiserver's --client-ca-file."""
    ca = ClientCert(directory / "ca.crt", directory / "ca.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(ca.key), "-out", str(ca.cert), "-days", str(VALID_DAYS), "-subj", "/CN=moectl-test-client-ca",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return ca


def make_client_cert(ca: ClientCert, directory: Path, user: str, groups: tuple[str, ...] = ()) -> ClientCert:
    """A client certificate for `user` in `groups`, signed by `ca` (the apiserver reads CN and O)."""
    subject = "".join(f"/O={group}" for group in groups) + f"/CN={user}"
    stem = user.replace(":", "-")
    client = ClientCert(directory / f"{stem}.crt", directory / f"{stem}.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(client.key), "-out", str(client.cert), "-days", str(VALID_DAYS), "-subj", subject,
         "-CA", str(ca.cert), "-CAkey", str(ca.key),
         "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "keyUsage=critical,digitalSignature",
         "-addext", "extendedKeyUsage=clientAuth")
    return client


def make_service_account_key(directory: Path) -> tuple[Path, Path]:
    """(private, public) RSA key PEM files: the apiserver signs tokens with the private one
    (--service-account-signing-key-file) and verifies them with the public one (--service-account-key-file)."""
    private, public = directory / "sa.key", directory / "sa.pub"
    _run("genrsa", "-out", str(private), "2048")
    _run("rsa", "-in", str(private), "-pubout", "-out", str(public))
    return private, public


def make_serving_cert(directory: Path, ip: str = "127.0.0.1") -> ClientCert:
    """A self-signed serving certificate for `ip` (an admission webhook's endpoint; the certificate is its own
    caBundle)."""
    serving = ClientCert(directory / "serving.crt", directory / "serving.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(serving.key), "-out", str(serving.cert), "-days", str(VALID_DAYS), "-subj", f"/CN={ip}",
         "-addext", f"subjectAltName=IP:{ip}", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyCertSign", "-addext", "extendedKeyUsage=serverAuth")
    return serving
