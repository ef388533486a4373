"""`moectl router --fd` (agents/router/main.py) with a descriptor that is not a listening socket: a clear error and
exit status 2 before anything starts. Old code: socket.socket(fileno=...) raised a traceback out of main."""

from __future__ import annotations

import os
import socket

from agents.protocol.http import listening_socket
from agents.router.main import inherited_listener, main


def test_a_closed_descriptor_is_a_clear_error(capsys):
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    assert main(["--fd", str(read_end), "--unified", "http://127.0.0.1:1"]) == 2
    assert "not an open socket" in capsys.readouterr().err


def test_a_file_or_an_unlistening_socket_is_refused_and_left_open(tmp_path, capsys):
    with open(tmp_path / "f", "w") as handle:
        assert main(["--fd", str(handle.fileno()), "--unified", "http://127.0.0.1:1"]) == 2
        assert "not an open socket" in capsys.readouterr().err
        os.fstat(handle.fileno())  # still open
    with socket.socket() as unbound:
        assert main(["--fd", str(unbound.fileno()), "--unified", "http://127.0.0.1:1"]) == 2
        assert "not a listening TCP one" in capsys.readouterr().err
        assert unbound.fileno() >= 0


def test_a_listening_socket_is_taken():
    with listening_socket() as sock:
        listener = inherited_listener(sock.fileno())
        assert listener.getsockname() == sock.getsockname()
        listener.detach()
