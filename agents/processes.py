"""Processes on this machine: a free port for a server or a gloo rendezvous, and a child tied to its parent."""

from __future__ import annotations

import random
import signal
import socket

_RANDOM = random.SystemRandom()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody holds now, for a caller that binds it soon after, from below the kernel's
    ephemeral range: an outgoing connection's local port, or another `bind(0)`, never takes it in between. (A
    server started by its own parent is better handed its socket: agents/protocol/http.py `listening_socket`.)"""
    first_ephemeral = _first_ephemeral_port()
    for _ in range(64):
        port = _RANDOM.randrange(first_ephemeral // 2, first_ephemeral)  # not the seeded module state: two
        # processes that seeded it alike would choose alike
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_ephemeral_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return max(2048, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768


def die_with_parent() -> None:
    """Call in the child (as Popen's preexec_fn, or first thing): Linux sends it SIGTERM when the process
    that started it dies, even without cleaning up, so no child outlives its launcher."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
