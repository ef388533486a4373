"""Processes on this machine: a free port for a server or a gloo rendezvous, and a child tied to its parent."""

from __future__ import annotations

import signal
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """Call in the child (as Popen's preexec_fn, or first thing): Linux sends it SIGTERM when the process
    that started it dies, even without cleaning up, so no child outlives its launcher."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
