"""The scale benchmark's tables (benchmarks/scale.py): one row per configuration, and today / new ratios."""

from __future__ import annotations

import numpy as np

from benchmarks.scale_run import Run


def table(runs: list[Run]) -> str:
    head = ("| code | database | GPUs | posts/window | ingest s/window (median, max) | ≤ 20% of 5 s | post p99 ms | "
            "posts refused | "
            "reconcile pass s (median, max) | agents fresh | RSS MB | database MB | after 1 h: RSS MB, database MB |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in runs:
        ingest, passes = r.ingest(), np.array(r.pass_seconds or [float("nan")])
        posts = len(r.windows[0].latencies)
        hour = (f"{r.hour_rss_mb:.0f}, {r.hour_database_mb:.1f} ({r.hour_windows} windows in "
                f"{r.hour_seconds / 60:.1f} min, {len(r.hour_pass_seconds)} passes)") \
            if r.hour_rss_mb is not None else "-"
        if r.controller_exit is not None:
            hour += f" CONTROLLER EXITED (status {r.controller_exit})"
        lines.append(f"| {r.code} | {r.database} | {r.num_gpus} | {posts} ({r.protocol}) | "
                     f"{np.median(ingest):.2f}, {ingest.max():.2f} | {'yes' if ingest.max() <= 1.0 else 'no'} | "
                     f"{r.p99_ms():.0f} | {r.num_refused()} | {np.median(passes):.2f}, {passes.max():.2f} | "
                     f"{r.num_fresh}/{r.num_agents} | {r.rss_mb:.0f} | {r.database_mb:.1f} | {hour} |")
    return "\n".join(lines)


def ratios(runs: list[Run]) -> str:
    lines = ["| database | GPUs | ingest today / new | post p99 today / new |", "|---|---|---|---|"]
    by_key = {(r.code, r.database, r.num_gpus): r for r in runs}
    for (code, database, gpus), new in by_key.items():
        today = by_key.get(("today", database, gpus))
        if code != "new" or today is None:
            continue
        lines.append(f"| {database} | {gpus} | {np.median(today.ingest()) / np.median(new.ingest()):.0f}x | "
                     f"{today.p99_ms() / new.p99_ms():.0f}x |")
    return "\n".join(lines)
