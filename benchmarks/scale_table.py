"""The scale benchmark's tables (benchmarks/scale.py): one row per configuration, the fast-forwarded hour, and
today / new ratios."""

from __future__ import annotations

import numpy as np

from benchmarks.scale_run import Run


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
                     + ["| " + " | ".join(row) + " |" for row in rows])


def table(runs: list[Run]) -> str:
    head = ["code", "API processes", "database", "GPUs", "posts/window", "ingest s/window (median, max)",
            "≤ 20% of 5 s", "post p99 ms", "posts refused", "reconcile pass s (median, max)", "agents fresh",
            "RSS MB", "database MB", "after 1 h: RSS MB, database MB", "GC pauses > 5 ms: count, longest ms",
            "load average (start, end)"]
    rows = []
    for r in runs:
        ingest, passes = r.ingest(), np.array(r.pass_seconds or [float("nan")])
        hour = (f"{r.hour_rss_mb:.0f}, {r.hour_database_mb:.1f} ({r.hour_windows} windows in "
                f"{r.hour_seconds / 60:.1f} min)") if r.hour_rss_mb is not None else "-"
        if r.controller_exit is not None:
            hour += f" CONTROLLER EXITED (status {r.controller_exit})"
        rows.append([r.code, str(r.api_processes), r.database, str(r.num_gpus),
                     f"{len(r.windows[0].latencies)} ({r.protocol}, {r.posts})",
                     f"{np.median(ingest):.2f}, {ingest.max():.2f}",
                     "yes" if ingest.max() <= 1.0 else "no", f"{r.p99_ms():.0f}", str(r.num_refused()),
                     f"{np.median(passes):.2f}, {passes.max():.2f}", f"{r.num_fresh}/{r.num_agents}",
                     f"{r.rss_mb:.0f}", f"{r.database_mb:.1f}", hour,
                     f"{len(r.gc_pauses)}, {max((p['ms'] for p in r.gc_pauses), default=0):.0f}",
                     f"{r.load_average[0]:.1f}, {r.load_average[1]:.1f}"])
    return _markdown(head, rows)


def hour_table(runs: list[Run]) -> str:
    """The fast-forwarded hour: its windows posted back to back (ingest and post p99 over all of them), its
    passes, and RSS and database size sampled every 60 windows (is it bounded: does it level off?)."""
    head = ["code", "API processes", "database", "GPUs", "windows in min", "ingest s/window (median, p99, max)",
            "windows > 1 s", "post p99 ms", "reconcile pass s (median, p99, max), passes", "RSS MB by 60 windows",
            "database MB by 60 windows", "largest tables MB at the end"]
    rows = []
    for r in runs:
        if not r.hour_results:
            continue
        ingest, passes = r.hour_ingest(), np.array(r.hour_pass_seconds or [float("nan")])
        rss = " ".join(f"{m:.0f}" for _, m, _ in r.hour_samples) + f" ({r.hour_rss_mb:.0f} at the end)"
        size = " ".join(f"{m:.1f}" for _, _, m in r.hour_samples) + f" ({r.hour_database_mb:.1f} at the end)"
        rows.append([r.code, str(r.api_processes), r.database, str(r.num_gpus),
                     f"{r.hour_windows} in {r.hour_seconds / 60:.1f}",
                     f"{np.median(ingest):.2f}, {np.quantile(ingest, 0.99):.2f}, {ingest.max():.2f}",
                     str(int((ingest > 1.0).sum())), f"{r.hour_p99_ms():.0f}",
                     f"{np.median(passes):.2f}, {np.quantile(passes, 0.99):.2f}, {passes.max():.2f}, "
                     f"{len(r.hour_pass_seconds)}", rss, size,
                     ", ".join(f"{name} {mb:.1f}" for name, mb in r.hour_tables_mb.items()) or "-"])
    return _markdown(head, rows)


def ratios(runs: list[Run]) -> str:
    by_key = {(r.code, r.database, r.num_gpus, r.api_processes, r.posts): r for r in runs}
    rows = []
    for (code, database, gpus, processes, posts), new in by_key.items():
        today = by_key.get(("today", database, gpus, processes, posts))
        if code != "new" or today is None:
            continue
        rows.append([database, str(gpus), str(processes), posts,
                     f"{np.median(today.ingest()) / np.median(new.ingest()):.1f}x",
                     f"{today.p99_ms() / new.p99_ms():.1f}x"])
    return _markdown(["database", "GPUs", "API processes", "posts", "ingest today / new", "post p99 today / new"], rows)
