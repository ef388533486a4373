"""The pool planner's side of a deployment's overview: its latest plan, and the serving windows it read."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.api.overview_schemas import PoolPlanOut, PoolPoint, PoolSizing
from controlplane.config import Settings
from controlplane.store import pool_plans, serving
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Deployment, Pool
from controlplane.store.window_reads import first_unread_index


def plan_out(session: Session, deployment: Deployment, pools: list[Pool]) -> PoolPlanOut | None:
    plan = pool_plans.get(session, deployment)
    if plan is None:
        return None
    by_role = {pool.role: pool for pool in pools}
    sizes = [PoolSizing(role=role, replicas=POOL_SIZE.versions.latest(session, by_role[role]).value if role in by_role
                        else None, **sizing) for role, sizing in plan["pools"].items()]
    return PoolPlanOut(at=plan["at"], slo=plan["targets"], gpu_budget=plan["gpu_budget"], pools=sizes,
                       load=plan["load"], forecast=plan["forecast"], threshold=plan["threshold"],
                       measured=plan["measured"])


def history(session: Session, deployment: Deployment, pools: list[Pool], settings: Settings, now: float,
            limit: int) -> list[PoolPoint]:
    current_index = first_unread_index(now, settings.window_seconds)
    # the PD pools, or a unified one (vLLM servers: controlplane/solve/pools/unified.py)
    roles = [role for role in ("prefill", "decode", "unified") if role in {pool.role for pool in pools}]
    windows = serving.pool_windows(session, deployment, pools, before_index=current_index, limit=limit,
                                   grid_seconds=settings.window_seconds)
    return [PoolPoint(end=w.end, request_rate=None if w.num_arrivals is None else w.num_arrivals / w.seconds,
                      ttft_p90=w.ttft.p90 if w.ttft else None, itl_p90=w.itl.p90 if w.itl else None,
                      replicas={role: len(w.of_role(role)) for role in roles}) for w in windows]
