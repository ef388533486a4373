"""Builds the test cluster's binaries from the Go module proxy, once per machine, into a cache outside the
repo keyed by the Kubernetes version: `${MOECTL_KUBE_CACHE:-~/.cache/moectl/kube}/<version>/bin/`.

kube-apiserver, kube-controller-manager, kube-scheduler and etcd come from the build module next to this file
(tests/support/kube/gomod/go.mod pins k8s.io/kubernetes and replaces its staging modules with their
published twins; `--pin vX.Y.Z` rewrites it from that release's own go.mod). helm and kwok (fake nodes, for
the fleet tests) are built with `go install module@version` against their own go.mod. The modules holding the
CRDs the tests install (LeaderWorkerSet, Grove, prometheus-operator) are downloaded into Go's module cache.

One progress line per binary with its elapsed time; what is cached is skipped. A failed build exits 1
under CI=true (make test stops); elsewhere it says so and exits 0, and the tests needing the cluster skip.
Standard library only: make test runs it before pytest.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
HELM = ("helm.sh/helm/v3", "v3.22.0", "helm.sh/helm/v3/cmd/helm")
KWOK = ("sigs.k8s.io/kwok", "v0.8.0", "sigs.k8s.io/kwok/cmd/kwok")
LWS = ("sigs.k8s.io/lws", "v0.9.0", "./cmd")  # the LeaderWorkerSet controller (the fleet tests' prefill pool)
# Go modules holding CRDs the tests install (support/kube/crds.py): downloaded into Go's module cache with the binaries
CRD_MODULES = (("github.com/prometheus-operator/prometheus-operator", "v0.85.0"), ("sigs.k8s.io/lws", "v0.9.0"),
               ("github.com/ai-dynamo/grove/operator/api", "v0.1.0-alpha.12-rc1"))
BUILD_HINT = "python tests/support/kube/build.py (make test runs it; needs Go >= 1.26 and the Go module proxy)"


@dataclass(frozen=True)
class Binary:
    """One binary to build: `package` with the build module (`version is None`), `go install package@version`, or
    (with `module`) `go build package` in a copy of module@version's own source: `go install` of LWS asks the proxy
    for the module's version list (its deprecation check), which the proxy here refuses."""

    name: str
    package: str
    stamp: str  # what the cached binary was built from; a different stamp means rebuild
    version: str | None = None
    module: str | None = None


def cache_root() -> Path:
    return Path(os.environ.get("MOECTL_KUBE_CACHE") or Path.home() / ".cache" / "moectl" / "kube")


def module_version(module: str, gomod: Path = GOMOD_DIR / "go.mod") -> str:
    """The version the build module's go.mod requires of `module`."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", gomod.read_text(), re.MULTILINE)
    if not found:
        raise ValueError(f"{gomod} does not require {module}")
    return found.group(1)


def kube_version() -> str:
    return module_version("k8s.io/kubernetes")


def bin_dir() -> Path:
    return cache_root() / kube_version() / "bin"


def binaries() -> list[Binary]:
    kube, etcd = kube_version(), module_version("go.etcd.io/etcd/server/v3")
    return [
        Binary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", f"k8s.io/kubernetes@{kube}"),
        Binary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", f"k8s.io/kubernetes@{kube}"),
        Binary("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", f"k8s.io/kubernetes@{kube}"),
        Binary("etcd", "./cmd/etcd", f"go.etcd.io/etcd/server/v3@{etcd}"),
        Binary("helm", HELM[2], f"{HELM[0]}@{HELM[1]}", version=HELM[1]),
        Binary("kwok", KWOK[2], f"{KWOK[0]}@{KWOK[1]}", version=KWOK[1]),
        Binary("lws-controller", LWS[2], f"{LWS[0]}@{LWS[1]}", version=LWS[1], module=LWS[0]),
    ]


def is_cached(directory: Path, binary: Binary) -> bool:
    stamp = directory / f".{binary.name}.stamp"
    return (directory / binary.name).is_file() and stamp.is_file() and stamp.read_text() == binary.stamp


def go_binary() -> str | None:
    return shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")


def go_env() -> dict[str, str]:
    # GOPATH/GOCACHE stay at Go's defaults (~/go, ~/.cache/go-build): outside the repo, shared across builds
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def version_ldflags(kube: str) -> str:
    """What the Kubernetes release build stamps in, so the apiserver reports its real version (helm reads it)."""
    major, minor = kube.lstrip("v").split(".")[:2]
    fields = {"gitVersion": kube, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
              "buildDate": "1970-01-01T00:00:00Z"}
    flags = [f"-X k8s.io/{package}/version.{key}={value}"
             for package in ("component-base", "client-go/pkg") for key, value in fields.items()]
    return " ".join(["-s", "-w", *flags])


def build_command(go: str, binary: Binary, output: Path) -> tuple[list[str], Path]:
    """(argv, working dir) that writes `binary` to `output`."""
    if binary.version is None:
        return [go, "build", "-trimpath", "-ldflags", version_ldflags(kube_version()), "-o", str(output),
                binary.package], GOMOD_DIR
    if binary.module is not None:
        return [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(output), binary.package], output.parent / "src"
    # `go install pkg@version` builds against that module's own go.mod; GOBIN is a temp dir
    return [go, "install", "-trimpath", "-ldflags", "-s -w", f"{binary.package}@{binary.version}"], output.parent


def build_one(go: str, binary: Binary, directory: Path) -> tuple[bool, str]:
    """Builds into a temp dir and renames into place, so an interrupted build leaves nothing half-written.
    Returns (ok, last lines of go's output)."""
    with tempfile.TemporaryDirectory(dir=directory, prefix=f".{binary.name}-") as scratch:
        output = Path(scratch) / binary.name
        argv, cwd = build_command(go, binary, output)
        env = {**go_env(), "GOBIN": scratch}
        if binary.module is not None:
            copied = _module_source(go, binary, cwd)
            if copied is not None:
                return False, copied
        elif binary.version is not None:
            env["GOFLAGS"] = "-buildvcs=false"  # -mod=readonly is meaningless outside a module
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not output.is_file():
            return False, "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        output.replace(directory / binary.name)
    (directory / f".{binary.name}.stamp").write_text(binary.stamp)
    return True, ""


def _module_source(go: str, binary: Binary, into: Path) -> str | None:
    """Copies module@version's source (from Go's module cache, downloaded first) to `into`, writable; the error
    when it cannot."""
    done = subprocess.run([go, "mod", "download", "-json", f"{binary.module}@{binary.version}"], cwd=into.parent,
                          env={**go_env(), "GOFLAGS": ""}, capture_output=True, text=True)
    if done.returncode != 0:
        return (done.stdout + done.stderr)[-2000:]
    shutil.copytree(json.loads(done.stdout)["Dir"], into)
    for path in [into, *into.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return None


def download_crd_modules(go: str) -> list[str]:
    """`go mod download` of each CRD module (a no-op once cached); returns those that failed."""
    failed, started = [], time.monotonic()
    with tempfile.TemporaryDirectory() as outside_any_module:
        for module, version in CRD_MODULES:
            done = subprocess.run([go, "mod", "download", f"{module}@{version}"], cwd=outside_any_module,
                                  env={**go_env(), "GOFLAGS": ""}, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"==> kube: CRDs {module}@{version} FAILED\n{done.stderr[-1000:]}", flush=True)
                failed.append(f"{module}@{version}")
    print(f"==> kube: CRD modules ({len(CRD_MODULES)}) in Go's module cache in {time.monotonic() - started:.0f}s",
          flush=True)
    return failed


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Two `make test`s on one machine build once: the second waits, then finds the binaries cached."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_all(only: list[str] | None = None) -> int:
    is_ci = os.environ.get("CI") == "true"
    directory = bin_dir()
    go = go_binary()
    if go is None:
        print(f"{'error' if is_ci else 'note'}: Go not found; the Kubernetes tests will skip. Install Go >= 1.26.")
        return 1 if is_ci else 0
    failed: list[str] = []
    with locked(directory):
        wanted = [b for b in binaries() if b.name in only] if only else binaries()
        if any(not is_cached(directory, b) and b.version is None for b in wanted):
            started = time.monotonic()
            done = subprocess.run([go, "mod", "download"], cwd=GOMOD_DIR, env=go_env(), capture_output=True,
                                  text=True)
            print(f"==> kube: go mod download ({kube_version()}) {'ok' if done.returncode == 0 else 'FAILED'} "
                  f"in {time.monotonic() - started:.0f}s", flush=True)
        for binary in wanted:
            if is_cached(directory, binary):
                print(f"==> kube: {binary.name} cached ({binary.stamp})", flush=True)
                continue
            print(f"==> kube: building {binary.name} ({binary.stamp}) ...", flush=True)
            started = time.monotonic()
            ok, log = build_one(go, binary, directory)
            elapsed = time.monotonic() - started
            if ok:
                print(f"==> kube: {binary.name} built in {elapsed:.0f}s -> {directory / binary.name}", flush=True)
                continue
            print(f"==> kube: {binary.name} FAILED after {elapsed:.0f}s\n{log}", flush=True)
            failed.append(binary.name)
        if not only:
            failed += download_crd_modules(go)
    if failed and is_ci:
        print(f"error: failed to build {', '.join(failed)} (CI=true: the Kubernetes tests must run)")
        return 1
    if failed:
        print(f"note: failed to build {', '.join(failed)}; the Kubernetes tests will skip. Retry: {BUILD_HINT}")
    return 0


def pin(version: str) -> None:
    """Rewrites the build module's go.mod for k8s.io/kubernetes@`version`: every staging module that the
    release's own go.mod replaces with ./staging/src/... is replaced with its published v0.Y.Z twin, and etcd's
    server is pinned to what the release requires."""
    go = go_binary() or "go"
    info = json.loads(subprocess.run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
                                     env=go_env(), check=True, capture_output=True, text=True).stdout)
    release = Path(info["GoMod"]).read_text()
    go_directive = re.search(r"^go (\S+)", release, re.MULTILINE).group(1)
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", release, re.MULTILINE)
    etcd = re.search(r"go\.etcd\.io/etcd/server/v3 (v\S+)", release).group(1)
    twin = "v0." + version.lstrip("v").split(".", 1)[1]
    lines = [
        "// The test cluster's build module (tests/support/kube/build.py). Generated by `build.py --pin`:",
        "// k8s.io/kubernetes is not meant to be a dependency; its staging modules resolve in its own repository",
        "// through replace lines a consumer does not inherit, so they are replaced here with their published twins.",
        "module moectl.test/kube",
        "",
        f"go {go_directive}",
        "",
        f"require (\n\tk8s.io/kubernetes {version}\n\tgo.etcd.io/etcd/server/v3 {etcd}\n)",
        "",
        # tool lines keep `go mod tidy` from dropping what the two commands import
        "tool (\n\tk8s.io/kubernetes/cmd/kube-apiserver\n\tk8s.io/kubernetes/cmd/kube-controller-manager\n"
        "\tk8s.io/kubernetes/cmd/kube-scheduler\n)",
        "",
        "replace (",
        *[f"\t{module} => {module} {twin}" for module in staging],
        ")",
        "",
    ]
    (GOMOD_DIR / "go.mod").write_text("\n".join(lines))
    env = {**go_env(), "GOFLAGS": "-mod=mod -buildvcs=false"}
    subprocess.run([go, "mod", "tidy"], cwd=GOMOD_DIR, env=env, check=True)
    print(f"pinned k8s.io/kubernetes {version} ({len(staging)} staging modules at {twin}), etcd server {etcd}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="build only these binaries (default: all)")
    parser.add_argument("--pin", metavar="VERSION", help="rewrite the build module for k8s.io/kubernetes@VERSION")
    args = parser.parse_args()
    if args.pin:
        pin(args.pin)
        return 0
    return build_all(args.names)


if __name__ == "__main__":
    sys.exit(main())
