"""`moectl status`: the overview numbers in the terminal."""

from __future__ import annotations

import time

import httpx


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def render_pools(o: dict) -> list[str]:
    """The pool planner's lines of a deployment: replicas per pool, SLO vs measured, forecast, decisions."""
    plan = o.get("pool_plan")
    if not plan:
        return []
    sizes = " · ".join(f"{p['role']} {p['ready'] + p['starting']} ({p['ready']} ready"
                       + (f", {p['starting']} starting" if p["starting"] else "")
                       + (f", {p['draining']} draining" if p["draining"] else "") + f"; {p['min']}..{p['max']})"
                       for p in plan["pools"])
    measured = plan["measured"]
    slo = " ".join(f"{name} {_seconds(measured.get(name))}/{_seconds(target)}" for name, target in plan["slo"].items())
    rate = measured.get("request_rate")
    forecast, sized_by = plan["forecast"], (plan.get("load") or {}).get("prefill_sized_by")
    lines = [f"  pools: {sizes}",
             f"  slo (measured/target): {slo} | load {_fmt(rate)} req/s"
             + (f" | forecast {forecast['request_rate']:.2f} req/s ({forecast['method']})" if forecast else "")
             + (f" | prefill by {sized_by}" if sized_by else "")
             + f" | local prefill < {_fmt(plan['threshold']['tokens'], 'd')} tokens"]
    lines += [f"  {p['role']}: {p['decision']['kind']} {p['decision']['current']}->{p['decision']['target']}: "
              f"{p['decision']['reason'][:110]}" for p in plan["pools"]]
    scaling = [a for a in o["last_actions"] if a["kind"] in ("pool_size", "local_prefill_threshold")]
    if scaling:
        a = scaling[0]
        change = (f"{a['predicted'].get('replicas_before')}->{a['predicted'].get('replicas_after')} replicas"
                  if a["kind"] == "pool_size" else
                  f"threshold {a['predicted'].get('tokens_before')}->{a['predicted'].get('tokens_after')}")
        lines.append(f"  last scaling: #{a['id']} {a['role']} {change} {a['status']}: {a['reason'][:90]}")
    return lines


def worst_floor(o: dict) -> float | None:
    """The imbalance floor of the pool whose imbalance the overview shows (its worst pool's)."""
    measured = [p for p in o["pools"] if p["imbalance"] is not None]
    return max(measured, key=lambda p: p["imbalance"]).get("imbalance_floor") if measured else None


def render(overviews: list[dict]) -> str:
    lines = [f"{'deployment':<16} {'mode':<8} {'imbalance':>9} {'floor':>6} {'a2a':>6} {'prefix':>6} {'mtp':>6} "
             f"{'run/wait':>9} {'placement':>10} {'agents':>9}  last action"]
    for o in overviews:
        versions = ",".join(f"{r}:{_fmt(v, 'd') if v is not None else 'mixed'}"
                            for r, v in o["placement_version"].items())
        action = o["last_actions"][0] if o["last_actions"] else None
        last = f"#{action['id']} {action['status']} {action['reason'][:50]}" if action else "-"
        lines.append(f"{o['deployment']:<16} {o['mode']:<8} {_fmt(o['imbalance']):>9} {_fmt(worst_floor(o)):>6} "
                     f"{_fmt(o['all2all_share'], '.0%'):>6} {_fmt(o['prefix_hit_ratio'], '.0%'):>6} "
                     f"{_fmt(o['mtp_acceptance'], '.0%'):>6} "
                     f"{o['queue']['running']:>4}/{o['queue']['waiting']:<4} {versions:>10} "
                     f"{o['agents']['fresh']:>3}/{o['agents']['total']:<3} fresh  {last}")
        if o.get("engine", "bundled") != "bundled":  # an engine moectl steers from outside (agents/adapters/)
            lines.append(f"  engine: {o['engine']} ({o.get('engine_applies', '')})")
        lines += render_pools(o)
    return "\n".join(lines)


def print_status(url: str, *, watch: float = 0) -> int:
    with httpx.Client(base_url=url, timeout=10) as client:
        while True:
            try:
                names = [d["name"] for d in client.get("/v1/deployments").raise_for_status().json()]
                overviews = [client.get(f"/v1/deployments/{n}/overview").raise_for_status().json() for n in names]
            except httpx.HTTPError as exc:
                print(f"error: cannot read {url} ({exc}); is the controller running? start it with `moectl up`")
                return 1
            print(render(overviews) if overviews else "no deployments registered yet", flush=True)
            if not watch:
                return 0
            time.sleep(watch)
            print()
