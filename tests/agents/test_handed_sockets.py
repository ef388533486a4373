"""A server started by its parent serves on the socket the parent bound (agents/protocol/http.py
`listening_socket`, as `moectl up` and the local scaler do): the port is held from the moment it is chosen, so
no other process takes it before the child serves. Each test keeps its own copy of the sockets open until the
child answers: a child that bound the port itself instead would be refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from support.processes import RANK_PROCESSES, die_with_parent, stop
from support.servers import wait_http

from agents.protocol.http import listening_socket
from controlplane.cmd.up import up
from controlplane.config import Settings


def test_a_handed_port_is_held_from_the_start():
    with listening_socket() as sock, socket.socket() as neighbour:
        with pytest.raises(OSError):
            neighbour.bind(("127.0.0.1", sock.getsockname()[1]))


def test_up_says_when_the_router_port_it_was_given_is_taken(capsys):
    with listening_socket() as taken:
        port = taken.getsockname()[1]
        assert up(Settings(), ep_size=1, router_port=port) == 1  # before it starts anything
    assert f"error: the router's port {port}: Address already in use" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_the_router_serves_on_the_socket_it_was_handed():
    with listening_socket() as sock:
        port, fd = sock.getsockname()[1], sock.fileno()
        router = subprocess.Popen([sys.executable, "-m", "agents.router", "--port", str(port), "--fd", str(fd),
                                   "--admin-token", "t"], pass_fds=(fd,), preexec_fn=die_with_parent)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
            assert router.poll() is None
        finally:
            stop(router)


@RANK_PROCESSES
@pytest.mark.timeout(180)
def test_worker_ranks_serve_on_the_sockets_they_were_handed():
    """Two ranks: each serves its HTTP port from the socket handed to the launcher, and they meet on the
    rendezvous socket the launcher bound for rank 0."""
    sockets = [listening_socket(), listening_socket()]
    ports, fds = [s.getsockname()[1] for s in sockets], [s.fileno() for s in sockets]
    worker = subprocess.Popen(
        [sys.executable, "-m", "agents.worker", "--sim", "--role", "decode", "--ep-size", "2", "--controller", "",
         "--ports", ",".join(map(str, ports)), "--fds", ",".join(map(str, fds))],
        pass_fds=fds, env=os.environ | {"OMP_NUM_THREADS": "1"}, preexec_fn=die_with_parent)
    try:
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)
        assert worker.poll() is None
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0
    finally:
        stop(worker)
        for sock in sockets:
            sock.close()
