"""Request dependencies: the database session, the clock, and who is calling with what role."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Path, Request
from sqlalchemy.orm import Session, sessionmaker

from agents.protocol import NAME_PATTERN, Role
from controlplane.api.actuation import Actuation
from controlplane.config import Settings
from controlplane.store import tokens

# people's roles are ranked; agent and alerts tokens each do one thing only
RANK = {"viewer": 1, "operator": 2, "admin": 3}


@dataclass(frozen=True)
class Caller:
    name: str  # recorded in the audit trail
    role: str


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_sessions(request: Request) -> sessionmaker[Session]:
    """For a request that commits in several transactions of its own (one per alert of a delivery)."""
    return request.app.state.sessions


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_now(request: Request) -> float:
    return request.app.state.clock()


def get_actuation(request: Request) -> Actuation:
    return request.app.state.actuation


def _caller(request: Request, authorization: str | None) -> Caller | None:
    if not authorization:
        return None
    if not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "the Authorization header must be 'Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    secret = authorization[7:].strip()
    settings: Settings = request.app.state.settings
    # bootstrap tokens from the environment, so a fresh install can create the first real tokens
    for expected, role in ((settings.api_token, "admin"), (settings.agent_token, "agent"),
                           (settings.alerts_token, "alerts")):
        if expected and hmac.compare_digest(secret.encode(), expected.encode()):
            return Caller(tokens.BOOTSTRAP_PREFIX + role, role)
    with request.app.state.sessions() as session:
        token = tokens.lookup(session, secret)
        if token is None:
            raise HTTPException(401, "unknown or revoked token; create one with `moectl token create`",
                                headers={"WWW-Authenticate": "Bearer"})
        return Caller(token.name, token.role)


def require(*roles: str):
    """A dependency admitting the given roles; a people's role admits every higher one too."""
    minimum = min((RANK[r] for r in roles if r in RANK), default=None)

    def dependency(request: Request, authorization: Annotated[str | None, Header()] = None) -> Caller:
        caller = _caller(request, authorization)
        if caller is None:
            if "anonymous" in roles and request.app.state.settings.anonymous_read:
                return Caller(tokens.ANONYMOUS, "viewer")
            raise HTTPException(401, "missing bearer token: send 'Authorization: Bearer <token>' (create one "
                                     "with `moectl token create --role ...`, or use the token `moectl up` printed)",
                                headers={"WWW-Authenticate": "Bearer"})
        is_allowed = caller.role in roles or (minimum is not None and RANK.get(caller.role, 0) >= minimum)
        if not is_allowed:
            wanted = " or ".join(r for r in roles if r != "anonymous")
            raise HTTPException(403, f"token {caller.name!r} has role {caller.role}; this needs {wanted}")
        return caller

    return dependency


SessionDep = Annotated[Session, Depends(get_session)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
NowDep = Annotated[float, Depends(get_now)]
ActuationDep = Annotated[Actuation, Depends(get_actuation)]
ViewerDep = Annotated[Caller, Depends(require("viewer", "anonymous"))]
OperatorDep = Annotated[Caller, Depends(require("operator"))]
AdminDep = Annotated[Caller, Depends(require("admin"))]
AgentDep = Annotated[Caller, Depends(require("agent"))]
AlertsDep = Annotated[Caller, Depends(require("alerts", "operator"))]
DeploymentName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63,
                                      description="a DNS label: lowercase letters, digits and '-', at most 63")]
PoolRole = Annotated[str, Path(pattern=f"^({'|'.join(r.value for r in Role)})$",
                               description="the pool: " + ", ".join(r.value for r in Role))]
# ids and versions are 32-bit INTEGER columns (PostgreSQL): larger path values are a 422, not a database error
RowId = Annotated[int, Path(ge=1, le=2**31 - 1)]
