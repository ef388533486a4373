"""The pruning job: deletes what is past its retention (`Settings.retain_*`), never what is in force.

What goes, by kind:
1. Load windows and serving windows (each instance's and each router's, `store.serving`). All go but each
   pool's (each deployment's, for routers) newest `history_windows` complete ones (what the planners and
   the views read) and those still filling. The pass itself prunes nothing: this job runs beside it.
2. Actions: settled ones last updated over `retain_actions_seconds` ago. Never one awaiting approval,
   applied and not yet verified, or a conflict moectl stands down for. Never the newest of its pool and knob
   (what `actuate.in_flight` reads), nor the one that last applied a pool's size (`actuate.scale`
   measures other writers against it).
3. Versions of every knob (`store.knobs`: placement, routing, pool size, local-prefill threshold): made
   over `retain_versions_seconds` ago. Never the newest of those (in force, or the one the newer
   versions replaced), nor one an open action needs (`store.actions.versions_in_use`).
4. Requests: handled over `retain_requests_seconds` ago (pending ones stay).
5. Alert events: received over `retain_alert_events_seconds` ago.
6. Agents: silent for `retain_agents_seconds` (gone long before, `agent_gone_seconds`).
7. Audit events: over `retain_audit_seconds` old.

Nothing younger than an hour is deleted whatever the settings say: the rails read the last hour (actions
and moved slots per hour, findings once an hour). The loop runs the job at most once per `prune_seconds`
(`Pruning`; with leader election only the leader, its commits fenced). Each kind runs in its own transaction,
at most `max_prune_rows` rows of each per run, so a run never holds a long write lock. `moectl prune`
runs it until nothing is left to delete.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from controlplane.actuate.fence import SOLE, Fence, guard
from controlplane.actuate.scale import last_applied
from controlplane.config import Settings
from controlplane.store import actions, alerts, audit, deployments, parks, requests, serving, windows
from controlplane.store.knobs import KNOBS
from controlplane.store.observed_tables import Agent, LoadWindow, ReplicaWindow, RouterWindow
from controlplane.store.tables import Deployment, Pool

log = logging.getLogger("moectl.prune")

MIN_AGE_SECONDS = 3600.0
# vacuumed by a run once they hold enough dead rows (PostgreSQL): windows are deleted every run and rewritten by
# every post of their window; every rank's agent
# row is rewritten every window. Each is also a kind of `prune`'s count, under the same name.
VACUUMED = tuple(t.__tablename__ for t in (LoadWindow, ReplicaWindow, RouterWindow, Agent))
# a table is vacuumed once its dead rows (since its last VACUUM) are at least this share of its live ones, and at
# least MIN_DEAD_ROWS: it stays within about twice its live size, and a DeepSeek-sized pool's windows table (its
# rows ~100 kB) is vacuumed every few dozen windows instead of every run (benchmarks/results/scale-2026-11-30.md)
DEAD_SHARE = 1.0
MIN_DEAD_ROWS = 50


def prune(sessions: sessionmaker[Session], settings: Settings, *, now: float, max_rows: int,
          fence: Fence = SOLE) -> dict[str, int]:
    """One run over every kind, at most `max_rows` rows of each (per pool for windows and versions, per
    deployment for router windows), each commit fenced. Returns how many rows of each kind went."""

    def before(retain_seconds: float) -> float:
        return now - max(retain_seconds, MIN_AGE_SECONDS)

    pruned: dict[str, int] = {}

    def add(kind: str, count: int) -> None:
        pruned[kind] = pruned.get(kind, 0) + count

    with sessions() as session:
        pool_ids = list(session.scalars(select(Pool.id).order_by(Pool.id)))
    kept_actions: set[int] = set()
    for pool_id in pool_ids:
        with sessions() as session, session.begin():
            guard(session, fence)
            pool = session.get(Pool, pool_id)
            if pool is None:  # its deployment was deleted since
                continue
            holder, _ = last_applied(session, pool)
            kept_actions |= {holder.id} if holder is not None else set()
            add("load_windows", windows.prune(session, pool, history_windows=settings.history_windows,
                                              limit=max_rows))
            add("replica_windows", serving.prune_replicas(session, pool, history_windows=settings.history_windows,
                                                          limit=max_rows))
            for kind, knob in KNOBS.items():
                add(f"{kind}_versions", knob.prune(session, pool, before=before(settings.retain_versions_seconds),
                                                   keep=actions.versions_in_use(session, pool, kind),
                                                   limit=max_rows))
    with sessions() as session:
        deployment_ids = list(session.scalars(select(Deployment.id).order_by(Deployment.id)))
    for deployment_id in deployment_ids:
        with sessions() as session, session.begin():
            guard(session, fence)
            deployment = session.get(Deployment, deployment_id)
            if deployment is not None:  # not deleted since
                add("router_windows", serving.prune_routers(session, deployment,
                                                            history_windows=settings.history_windows,
                                                            limit=max_rows))
    for kind, delete in (
        ("actions", lambda s: actions.prune(s, before=before(settings.retain_actions_seconds), keep=kept_actions,
                                            limit=max_rows)),
        ("requests", lambda s: requests.prune(s, before=before(settings.retain_requests_seconds), limit=max_rows)),
        ("alert_events", lambda s: alerts.prune(s, before=before(settings.retain_alert_events_seconds),
                                                limit=max_rows)),
        ("agents", lambda s: deployments.prune_agents(s, silent_since=before(settings.retain_agents_seconds),
                                                      limit=max_rows)),
        ("audit_events", lambda s: audit.prune(s, before=before(settings.retain_audit_seconds), limit=max_rows)),
        ("knob_parks", lambda s: parks.prune(s, before=before(settings.retain_actions_seconds), limit=max_rows)),
    ):
        with sessions() as session, session.begin():
            guard(session, fence)
            add(kind, delete(session))
    _vacuum(sessions, pruned)
    return pruned


def _vacuum(sessions: sessionmaker[Session], pruned: dict[str, int]) -> None:
    """PostgreSQL: makes the space of the deleted and rewritten rows of the VACUUMED tables that hold enough of
    them (DEAD_SHARE) reusable now. Autovacuum would, but on its own schedule (a minute's
    nap, and only past a fifth of a table dead) and the database grew by the windows until it came. A table's
    dead rows are the server's count (deletes and updates by anyone since its last VACUUM) and this run's
    deletes, which the server may not count yet (each session reports its counts at most once a second).
    VACUUM blocks neither reads nor writes (it runs outside a transaction); SQLite reuses freed pages by
    itself."""
    with sessions() as session:
        engine = session.get_bind()
    if engine.dialect.name != "postgresql":
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        counts = conn.execute(text("SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                                   "WHERE schemaname = current_schema() AND relname = ANY(:names)"),
                              {"names": list(VACUUMED)})
        due = [row.relname for row in counts if _is_due(row.n_live_tup, row.n_dead_tup, pruned.get(row.relname, 0))]
        for table in due:
            conn.exec_driver_sql(f"VACUUM {table}")


def _is_due(num_live: int, num_dead: int, num_deleted: int) -> bool:
    """num_live, num_dead: the server's counts, which may or may not hold the run's num_deleted yet; taken as if
    they did not (the table then looks emptier and deader than it may be: it is vacuumed early, never late)."""
    return num_dead + num_deleted >= max(MIN_DEAD_ROWS, DEAD_SHARE * max(num_live - num_deleted, 0))


def prune_all(sessions: sessionmaker[Session], settings: Settings, *, now: float) -> dict[str, int]:
    """Runs until nothing is left to delete (`moectl prune`)."""
    total: dict[str, int] = {}
    while True:
        pruned = prune(sessions, settings, now=now, max_rows=settings.max_prune_rows)
        for kind, count in pruned.items():
            total[kind] = total.get(kind, 0) + count
        if all(count < settings.max_prune_rows for count in pruned.values()):
            return total


class Pruning:
    """The loop's schedule: `run_if_due` prunes at most once per `prune_seconds`, on the leader only. A failed
    run is logged and tried again when next due; it never stops the loop."""

    def __init__(self, settings: Settings, *, fence: Fence = SOLE):
        self.settings, self.fence = settings, fence
        self.next_at = 0.0

    def run_if_due(self, sessions: sessionmaker[Session], *, now: float) -> dict[str, int] | None:
        if now < self.next_at or not self.fence.is_leading():
            return None
        self.next_at = now + self.settings.prune_seconds
        started = time.perf_counter()
        try:
            pruned = prune(sessions, self.settings, now=now, max_rows=self.settings.max_prune_rows, fence=self.fence)
        except Exception:
            log.exception("pruning failed; trying again in %.0fs", self.settings.prune_seconds)
            return None
        if any(pruned.values()):
            log.info("pruned %s in %.2fs", ", ".join(f"{n} {kind}" for kind, n in pruned.items() if n),
                     time.perf_counter() - started)
        return pruned
