"""Serving windows: each instance's (its ranks' reports merged) and each router's, read back as the
deployment's windows the pool planner sees (`PoolWindow`, oldest first)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.observed.serving import PoolWindow, merge, pool_window, replica_window
from controlplane.store.batches import delete_some
from controlplane.store.observed_tables import ReplicaWindow, RouterWindow
from controlplane.store.tables import Deployment, Pool


def add_replica_report(session: Session, *, pool: Pool, instance: str, window_index: int, age_windows: int,
                       counters: dict[str, float], num_reports: int = 1) -> None:
    """The part of an instance's window that `num_reports` ranks reported (one rank's, or an EP group's merged).
    age_windows: windows its youngest rank reported before this one; the instance is as old as its youngest rank."""
    row = session.scalar(select(ReplicaWindow).where(
        ReplicaWindow.pool_id == pool.id, ReplicaWindow.instance == instance,
        ReplicaWindow.window_index == window_index).with_for_update())
    if row is None:
        row = ReplicaWindow(pool_id=pool.id, instance=instance, window_index=window_index, age_windows=age_windows,
                            num_reports=0, counters={})
        session.add(row)
    row.counters = merge(row.counters, counters)
    row.age_windows = min(row.age_windows, age_windows)
    row.num_reports += num_reports
    session.flush()


def add_router_window(session: Session, *, deployment: Deployment, router: str, window_index: int,
                      window_seconds: float, counters: dict[str, float]) -> bool:
    """Stores a router's window; False when that router already reported it (a retry: kept once)."""
    found = session.scalar(select(RouterWindow.id).where(
        RouterWindow.deployment_id == deployment.id, RouterWindow.router == router,
        RouterWindow.window_index == window_index))
    if found is not None:
        return False
    session.add(RouterWindow(deployment_id=deployment.id, router=router, window_index=window_index,
                             window_seconds=window_seconds, counters=counters))
    session.flush()
    return True


def pool_windows(session: Session, deployment: Deployment, pools: list[Pool], *, before_index: int, limit: int,
                 grid_seconds: float) -> tuple[PoolWindow, ...]:
    """The deployment's last `limit` windows before `before_index` (complete ones), oldest first: each with
    its routers' counters merged and one replica window per instance of `pools`; a window nobody reported
    is absent."""
    since = before_index - limit
    routers: dict[int, dict[str, float]] = {}
    for row in session.scalars(select(RouterWindow).where(
            RouterWindow.deployment_id == deployment.id, RouterWindow.window_index >= since,
            RouterWindow.window_index < before_index)):
        routers[row.window_index] = merge(routers.get(row.window_index, {}), row.counters)
    role_of = {pool.id: pool.role for pool in pools}
    replicas: dict[int, list] = {}
    for row in session.scalars(select(ReplicaWindow).where(
            ReplicaWindow.pool_id.in_(role_of), ReplicaWindow.window_index >= since,
            ReplicaWindow.window_index < before_index).order_by(ReplicaWindow.instance)):
        replicas.setdefault(row.window_index, []).append(
            replica_window(row.instance, role_of[row.pool_id], row.age_windows, row.counters))
    return tuple(pool_window((index + 1) * grid_seconds, grid_seconds, routers.get(index),
                             tuple(replicas.get(index, ()))) for index in sorted(set(routers) | set(replicas)))


def reported_threshold(session: Session, deployment: Deployment) -> int | None:
    """The local-prefill threshold the deployment's routers last said they route by."""
    row = session.scalar(select(RouterWindow).where(RouterWindow.deployment_id == deployment.id)
                         .order_by(RouterWindow.window_index.desc()).limit(1))
    value = None if row is None else row.counters.get("local_prefill_threshold")
    return None if value is None else int(value)


def prune_replicas(session: Session, pool: Pool, *, history_windows: int, limit: int) -> int:
    """Deletes (at most `limit` of) the pool's replica windows older than the newest `history_windows` complete
    ones the pool planner reads and the two still filling, as `windows.prune` does for load windows
    (controlplane/loop/prune.py). Returns how many went."""
    newest = session.scalar(select(func.max(ReplicaWindow.window_index)).where(ReplicaWindow.pool_id == pool.id))
    if newest is None:
        return 0
    return delete_some(session, ReplicaWindow, ReplicaWindow.pool_id == pool.id,
                       ReplicaWindow.window_index <= newest - (history_windows + 2), limit=limit)


def prune_routers(session: Session, deployment: Deployment, *, history_windows: int, limit: int) -> int:
    """The same for the deployment's router windows."""
    newest = session.scalar(select(func.max(RouterWindow.window_index))
                            .where(RouterWindow.deployment_id == deployment.id))
    if newest is None:
        return 0
    return delete_some(session, RouterWindow, RouterWindow.deployment_id == deployment.id,
                       RouterWindow.window_index <= newest - (history_windows + 2), limit=limit)
