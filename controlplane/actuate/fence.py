"""Fencing: only the leader writes, and it checks its leadership before each write.

A `Fence` is what the writer asks. Without leader election (one process owns the database: tests, `moectl
reconcile --once`, a single replica) it is `SOLE`, which always leads; with it, a `LeaderElector`
(controlplane/leader/) answers. `guard` fences a database session: a transaction that wrote anything checks
the leadership inside the transaction just before it commits, and stamps the actions it made with the leader
(identity and term); a replica that lost the leadership commits nothing. Writes to the platform (a scale
subresource, a pod's annotation) call `check` themselves right before each request.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import event
from sqlalchemy.orm import Session

from controlplane.store.tables import Action

WROTE, GUARDED = "moectl.fence.wrote", "moectl.fence.guarded"


class NotLeader(Exception):
    """This replica does not hold the leadership (or no longer does): it writes nothing."""


class Fence(Protocol):
    def is_leading(self) -> bool:
        """Cheap and local: whether this replica's last renewal of its leadership is recent enough to act on."""
        ...

    @property
    def token(self) -> str | None:
        """The leadership this replica holds, "identity#term", recorded on its writes; None: no election."""
        ...

    def check(self, session: Session | None = None) -> None:
        """Before a write: raises NotLeader unless this replica holds the leadership now (a live read of the
        election; given `session`, inside its transaction, so the check and the write commit together)."""
        ...


class Sole:
    """No election: this process is the only writer."""

    token = None

    def is_leading(self) -> bool:
        return True

    def check(self, session: Session | None = None) -> None:
        pass


SOLE = Sole()


def guard(session: Session, fence: Fence) -> None:
    """Fences `session` (for its lifetime): commits that wrote check `fence` first, actions carry its token."""
    if isinstance(fence, Sole) or session.info.get(GUARDED):
        return
    session.info[GUARDED] = True

    @event.listens_for(session, "before_flush")
    def _stamp(session: Session, _context, _instances) -> None:  # noqa: ANN001
        for row in session.new:
            if isinstance(row, Action) and row.leader is None:
                row.leader = fence.token

    @event.listens_for(session, "after_flush")
    def _wrote(session: Session, _context) -> None:  # noqa: ANN001
        session.info[WROTE] = True

    @event.listens_for(session, "after_rollback")
    def _forget(session: Session) -> None:
        session.info.pop(WROTE, None)

    @event.listens_for(session, "before_commit")
    def _check(session: Session) -> None:
        session.flush()  # commit flushes after this hook: what is still pending counts as written too
        if session.info.pop(WROTE, False):
            fence.check(session)
