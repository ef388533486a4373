"""Start-up time of the Kubernetes test cluster (tests/support/kube): etcd, kube-apiserver (start to
/readyz 200) and kube-controller-manager (start to /healthz and its first act: the `default`
ServiceAccount), and the teardown, over a few starts. Build times come from the build script's own
progress lines (`python tests/support/kube/build.py`). Prints a markdown table.

    python -m benchmarks.kube_cluster [--repeats 3]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS_DIR))  # the cluster lives with the tests' support code, not in a package
    from support.kube import build
    from support.kube.cluster import running_cluster

    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        started = time.monotonic()
        with running_cluster(build.bin_dir()) as cluster:
            for name, seconds in cluster.startup_seconds.items():
                rows.setdefault(name, []).append(seconds)
            rows.setdefault("all three, start to ready", []).append(time.monotonic() - started)
            stopping = time.monotonic()
        rows.setdefault("teardown (stop all, remove dir)", []).append(time.monotonic() - stopping)
    print(f"Kubernetes {build.kube_version()} test cluster, {args.repeats} starts (median, min-max, seconds)\n")
    print("| phase | median | min | max |\n|---|---|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")


if __name__ == "__main__":
    main()
