"""The router's admin API: the instances it routes to, added, drained and removed while it serves.

  GET    /admin/instances                 every instance: role, rank URLs, serving or draining, in flight.
  POST   /admin/instances                 {name, role, urls}: route to it from now on (the same again: no-op).
  POST   /admin/instances/{name}/drain    no new requests go to it; those in flight finish.
  DELETE /admin/instances/{name}          forget it; 409 while requests are in flight there, unless ?force=true.

Every call needs `Authorization: Bearer <admin token>` (`--admin-token`); without one configured the API is
off (403). A pool scaler (the controller's, controlplane/actuate/local.py) drains an instance, waits for
`num_in_flight` 0 (requests decoding there and KV hand-offs from it included), then removes it.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from agents.router.policy import Endpoint

INSTANCE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class InstanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=INSTANCE_PATTERN, description="the instance (EP group), unique in the router")
    role: Literal["prefill", "decode", "unified"]
    urls: list[str] = Field(min_length=1, max_length=4096, description="its ranks' base URLs (http://host:port)")


class InstanceOut(BaseModel):
    name: str
    role: str
    urls: list[str]
    state: Literal["serving", "draining"]
    num_in_flight: int = Field(description="requests the router has there: prefills until their KV arrived, "
                                           "decodes until their last token")
    num_healthy: int = Field(description="ranks that answered the router's last poll")


def instances(endpoints: list[Endpoint]) -> dict[str, list[Endpoint]]:
    """instance name -> its ranks, in the order they were added."""
    out: dict[str, list[Endpoint]] = {}
    for endpoint in endpoints:
        out.setdefault(endpoint.instance, []).append(endpoint)
    return out


def describe(name: str, ranks: list[Endpoint]) -> InstanceOut:
    return InstanceOut(name=name, role=ranks[0].role, urls=[e.url for e in ranks],
                       state="draining" if ranks[0].is_draining else "serving",
                       num_in_flight=sum(e.num_in_flight for e in ranks), num_healthy=sum(e.is_healthy for e in ranks))


def admin_router(endpoints: list[Endpoint], admin_token: str) -> APIRouter:
    """endpoints: the router's own list, changed in place (the routing reads it on every request)."""

    def authorized(authorization: Annotated[str | None, Header()] = None) -> None:
        if not admin_token:
            raise HTTPException(403, "the admin API is off: start the router with --admin-token "
                                     "(or MOECTL_ROUTER_ADMIN_TOKEN)")
        if not authorization or not authorization.lower().startswith("bearer "):
            raise HTTPException(401, "missing bearer token: send 'Authorization: Bearer <admin token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(authorization[7:].strip().encode(), admin_token.encode()):
            raise HTTPException(401, "wrong admin token", headers={"WWW-Authenticate": "Bearer"})

    api = APIRouter(prefix="/admin/instances", tags=["admin"], dependencies=[Depends(authorized)])

    def ranks_of(name: str) -> list[Endpoint]:
        ranks = instances(endpoints).get(name)
        if ranks is None:
            known = ", ".join(instances(endpoints)) or "none"
            raise HTTPException(404, f"no instance {name!r} (known: {known})")
        return ranks

    @api.get("", response_model=list[InstanceOut])
    def list_instances() -> list[InstanceOut]:
        return [describe(name, ranks) for name, ranks in instances(endpoints).items()]

    @api.post("", response_model=InstanceOut)
    def add_instance(body: InstanceIn) -> InstanceOut:
        urls = [u.strip().rstrip("/") for u in body.urls]
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise HTTPException(422, f"urls: {bad[0]!r} is not an http(s) URL")
        existing = instances(endpoints).get(body.name)
        if existing is not None:
            if existing[0].role != body.role or [e.url for e in existing] != urls:
                raise HTTPException(409, f"instance {body.name!r} is already registered as {existing[0].role} at "
                                         f"{', '.join(e.url for e in existing)}; remove it first")
            return describe(body.name, existing)
        taken = {e.url: e.instance for e in endpoints}
        clash = next((u for u in urls if u in taken), None)
        if clash is not None:
            raise HTTPException(409, f"{clash} already belongs to instance {taken[clash]!r}")
        endpoints.extend(Endpoint(url, body.role, instance=body.name) for url in urls)
        return describe(body.name, ranks_of(body.name))

    @api.post("/{name}/drain", response_model=InstanceOut)
    def drain_instance(name: str) -> InstanceOut:
        ranks = ranks_of(name)
        for endpoint in ranks:
            endpoint.is_draining = True
        return describe(name, ranks)

    @api.delete("/{name}", response_model=InstanceOut)
    def remove_instance(name: str, force: Annotated[bool, Query(description="even with requests in flight")] = False
                        ) -> InstanceOut:
        ranks = ranks_of(name)
        described = describe(name, ranks)
        if described.num_in_flight and not force:
            raise HTTPException(409, f"instance {name!r} has {described.num_in_flight} request(s) in flight; drain it "
                                     f"and wait for 0 (GET /admin/instances), or pass force=true")
        endpoints[:] = [e for e in endpoints if e.instance != name]
        return described

    return api
