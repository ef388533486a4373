"""Request dependencies: the database session, the clock, and who is calling."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.orm import Session

from controlplane.config import Settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_now(request: Request) -> float:
    return request.app.state.clock()


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token: send 'Authorization: Bearer <token>' "
                                 "(the token `moectl serve` or `moectl up` printed, or MOECTL_API_TOKEN)",
                            headers={"WWW-Authenticate": "Bearer"})
    return authorization[7:].strip()


def _matches(token: str, *expected: str) -> bool:
    return any(e and hmac.compare_digest(token.encode(), e.encode()) for e in expected)


def require_operator(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """Returns the caller's name for the audit trail."""
    if not _matches(_bearer(authorization), request.app.state.settings.api_token):
        raise HTTPException(403, "this token may not change deployments or policies")
    return "operator"


def require_agent(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    settings = request.app.state.settings
    if not _matches(_bearer(authorization), settings.agent_token, settings.api_token):
        raise HTTPException(403, "this token may not post snapshots")
    return "agent"


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
NowDep = Annotated[float, Depends(get_now)]
OperatorDep = Annotated[str, Depends(require_operator)]
AgentDep = Annotated[str, Depends(require_agent)]
