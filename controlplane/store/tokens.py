"""API tokens: created once (the secret is shown then and never again), looked up by hash."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.tables import Token
from controlplane.store.timestamps import utc

ROLES = ("viewer", "operator", "admin", "agent", "alerts")
SECRET_PREFIX = "moectl_"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(session: Session, *, name: str, role: str, created_by: str, now: float) -> str:
    """Returns the secret. Raises ValueError for an unknown role or a name already taken."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if session.scalar(select(Token.id).where(Token.name == name)) is not None:
        raise ValueError(f"a token named {name!r} exists; revoke it first or pick another name")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    session.add(Token(name=name, role=role, secret_sha256=digest(secret), prefix=secret[:12],
                      created_by=created_by, created_at=utc(now)))
    session.flush()
    return secret


def lookup(session: Session, secret: str) -> Token | None:
    token = session.scalar(select(Token).where(Token.secret_sha256 == digest(secret)))
    return token if token is not None and token.revoked_at is None else None


def list_all(session: Session) -> list[Token]:
    return list(session.scalars(select(Token).order_by(Token.name)))


def revoke(session: Session, name: str, *, now: float) -> bool:
    token = session.scalar(select(Token).where(Token.name == name, Token.revoked_at.is_(None)))
    if token is None:
        return False
    token.revoked_at = utc(now)
    return True
