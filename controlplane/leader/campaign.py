"""Keeps a replica campaigning in the background: renew while leading, take over when the leader is gone."""

from __future__ import annotations

import logging
import threading

from controlplane.leader.elector import LeaderElector
from controlplane.store.db import is_unavailable

log = logging.getLogger("moectl.leader")


def keep_campaigning(elector: LeaderElector, *, stop: threading.Event, retry_seconds: float) -> None:
    """Runs until `stop`, then releases the leadership so another replica takes it at once."""
    while not stop.is_set():
        try:
            elector.campaign()
        except Exception as exc:  # the election's store unreachable: keep trying; the fence holds meanwhile
            if is_unavailable(exc):  # busy or gone: expected now and then, no traceback to read
                log.warning("%s could not reach %s (%s); retrying in %gs", elector.identity, elector.where,
                            str(exc.orig).splitlines()[0], retry_seconds)
            else:
                log.exception("%s could not reach %s; retrying in %gs", elector.identity, elector.where,
                              retry_seconds)
        stop.wait(retry_seconds)
    try:
        elector.release()
    except Exception:
        log.exception("%s could not release %s; it expires by itself", elector.identity, elector.where)
