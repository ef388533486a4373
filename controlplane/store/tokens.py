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
# authors the controller records itself (the loop's changes, anonymous reads, the tokens from the
# environment): a token of such a name could sign changes as them
LOOP, ANONYMOUS, BOOTSTRAP_PREFIX = "loop", "anonymous", "bootstrap-"
RESERVED_NAMES = (LOOP, ANONYMOUS)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(session: Session, *, name: str, role: str, created_by: str, now: float) -> str:
    """Returns the secret. Raises ValueError for an unknown role or a reserved name, NameTaken for the
    name of a token not revoked (a revoked token's name may be given again)."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if name in RESERVED_NAMES or name.startswith(BOOTSTRAP_PREFIX):
        raise ValueError(f"token name {name!r} is reserved: the controller records {', '.join(RESERVED_NAMES)} "
                         f"and {BOOTSTRAP_PREFIX}* as the authors of its own changes; pick another name")
    if session.scalar(select(Token.id).where(Token.name == name, Token.revoked_at.is_(None))) is not None:
        raise NameTaken(f"a token named {name!r} exists; revoke it first or pick another name")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    session.add(Token(name=name, role=role, secret_sha256=digest(secret), prefix=secret[:12],
                      created_by=created_by, created_at=utc(now)))
    session.flush()
    return secret


class NameTaken(ValueError):
    pass


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
