"""moectl sizing a GPU fleet on the test cluster with kube-scheduler and kwok (tests/support/kube/fleet.py): the
same pools at 64 GPUs (8 nodes) and at 1,024 GPUs (128 nodes), each on a cluster of its own, side by side.

Per fleet, half the GPUs to decode (a Deployment of 8-GPU pods) and half to prefill (LeaderWorkerSet groups of
2 x 8-GPU pods, made by the LeaderWorkerSet controller itself), then a traffic shift (an eighth of the GPUs from
decode to prefill, decode drained first). Measured:

- decision to all pods Ready: from the pass that writes the size until every pod of both pools is Ready (kwok
  makes a placed pod Ready 2 s after it starts: a model load, scaled down);
- apiserver writes per change: moectl's own requests during the passes that make it, by verb (its client counted);
- the controller's pass time with the whole fleet: one reconcile of a pool with nothing to change (it reads the
  scale, the object, the HPAs and the pool's pods), median of 10.

    python -m benchmarks.kube_fleet [--passes 10]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import sys
import tempfile
import time

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests"
FLEETS = (8, 128)  # nodes of 8 GPUs: 64 and 1,024 GPUs


def counted(api_client) -> collections.Counter:
    """Counts the requests `api_client` sends, by HTTP method."""
    counts: collections.Counter = collections.Counter()
    request = api_client.rest_client.request

    def counting(method, url, *args, **kwargs):
        counts[method] += 1
        return request(method, url, *args, **kwargs)

    api_client.rest_client.request = counting
    return counts


def writes(counts: collections.Counter) -> int:
    return sum(n for verb, n in counts.items() if verb in ("POST", "PUT", "PATCH", "DELETE"))


def until_ready(lws, pods_of, num_decode: int, num_prefill_pods: int, timeout: float = 300.0) -> float:
    from support.kube.fleet import is_ready
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        decode, prefill = pods_of("decode"), lws.pods()
        if len(decode) == num_decode and len(prefill) == num_prefill_pods and all(map(is_ready, decode + prefill)):
            return time.monotonic() - started
        time.sleep(0.2)
    raise TimeoutError("pods not Ready")


def measure(bin_dir, num_nodes: int, num_passes: int) -> dict:
    from kubernetes.client import CoreV1Api
    from support.kube.fleet import serving_fleet
    gpus = num_nodes * 8
    with tempfile.TemporaryDirectory() as scratch, \
            serving_fleet(bin_dir, num_nodes, pathlib.Path(scratch) / "moectl.db") as served:
        _, _, admin, namespace, pools, lws = served
        counts = counted(pools.scaler.objects.api_client)  # one ApiClient behind all of the scaler's APIs
        core = CoreV1Api(admin)

        def pods_of(role: str):
            return [p for p in core.list_namespaced_pod(namespace, label_selector="app=decode").items
                    if p.metadata.deletion_timestamp is None]

        out = {"gpus": gpus}
        num_decode, num_groups = gpus // 2 // 8, gpus // 2 // 16
        counts.clear()
        started = time.monotonic()
        pools.reconcile("decode", replicas=num_decode)
        pools.reconcile("prefill", replicas=num_groups)
        out["up_writes"] = writes(counts)
        out["up_ready_s"] = time.monotonic() - started + until_ready(lws, pods_of, num_decode, 2 * num_groups)

        shift = max(16, gpus // 8)  # GPUs moved: at least one prefill group
        # a window later: an applied size holds its pool for a window (or the policy's cooldown), and a person's
        # next size meanwhile is refused as in flight
        pools.now += pools.settings.window_seconds
        counts.clear()
        started = time.monotonic()
        pools.reconcile("decode", replicas=num_decode - shift // 8)
        decode_writes = writes(counts)
        counts.clear()
        pools.reconcile("prefill", replicas=num_groups + shift // 16)
        out["shift_writes"] = (decode_writes, writes(counts))
        out["shift_ready_s"] = time.monotonic() - started + until_ready(lws, pods_of, num_decode - shift // 8,
                                                                        2 * (num_groups + shift // 16))
        out["leaving"] = len(pools.actions("decode")[-1].measured["leaving"])

        passes, reads = [], []
        for _ in range(num_passes):
            counts.clear()
            started = time.monotonic()
            pools.reconcile("decode")
            passes.append(time.monotonic() - started)
            reads.append(sum(counts.values()))
            assert writes(counts) == 0, "a pass with nothing to change wrote"
        out["pass_ms"] = statistics.median(passes) * 1000
        out["pass_requests"] = statistics.median(reads)
        out["pods"] = len(pods_of("decode")) + len(lws.pods())
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS_DIR))
    from support.kube.fixture import require_built
    bin_dir = require_built()
    results = []
    for num_nodes in FLEETS:
        print(f"==> fleet of {num_nodes} nodes ({num_nodes * 8} GPUs) ...", flush=True)
        results.append(measure(bin_dir, num_nodes, args.passes))
    small, large = results
    print("\n| | 64 GPUs | 1,024 GPUs | ratio |\n|---|---|---|---|")
    rows = [("pods at the end", "pods", "{:.0f}"),
            ("scale-up from 0 to half/half: decision to all pods Ready (s)", "up_ready_s", "{:.1f}"),
            ("scale-up: moectl's apiserver writes (both pools)", "up_writes", "{:.0f}"),
            ("traffic shift (1/8 of GPUs, at least 16, decode -> prefill): decision to all Ready (s)",
             "shift_ready_s", "{:.1f}"),
            ("pass with nothing to change, whole fleet (ms, median)", "pass_ms", "{:.0f}"),
            ("requests in that pass (all reads)", "pass_requests", "{:.0f}")]
    for name, key, fmt in rows:
        ratio = large[key] / small[key] if small[key] else float("nan")
        print(f"| {name} | {fmt.format(small[key])} | {fmt.format(large[key])} | {ratio:.2f} |")
    for r in results:
        decode, prefill = r["shift_writes"]
        print(f"\n{r['gpus']} GPUs, traffic shift: decode scale-down {decode} writes ({r['leaving']} pods marked "
              f"leaving + 1 scale + 1 Event), prefill scale-up {prefill} writes (1 scale + 1 Event)")


if __name__ == "__main__":
    main()
