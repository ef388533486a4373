"""`moectl token`: manage API tokens straight in the database, e.g. to mint the first admin token."""

from __future__ import annotations

import getpass
import time

from controlplane.config import Settings
from controlplane.store import tokens
from controlplane.store.db import make_engine, make_sessions, upgrade


def token_command(settings: Settings, *, action: str, name: str | None, role: str) -> int:
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds)
    try:
        with make_sessions(engine)() as session, session.begin():
            if action == "list":
                for t in tokens.list_all(session):
                    state = "revoked" if t.revoked_at else "active"
                    print(f"{t.name:<24} {t.role:<9} {t.prefix}...  {state}  by {t.created_by}")
                return 0
            if not name:
                print(f"error: `moectl token {action}` needs --name")
                return 2
            if action == "revoke":
                if not tokens.revoke(session, name, now=time.time()):
                    print(f"error: no active token named {name!r}; `moectl token list` shows them")
                    return 1
                print(f"revoked {name}")
                return 0
            try:
                secret = tokens.create(session, name=name, role=role, created_by=f"cli:{getpass.getuser()}",
                                       now=time.time())
            except ValueError as exc:
                print(f"error: {exc}")
                return 1
            print(f"created {role} token {name!r}; it is shown once, store it now:\n{secret}")
            return 0
    finally:
        engine.dispose()
