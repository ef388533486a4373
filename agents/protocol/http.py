"""HTTP between the parts: what servers (worker ranks, router, controller) promise the clients that keep
connections to them (agents posting snapshots, the router, the load generator, people's tools)."""

import socket

# An idle kept-alive connection's life on every server: longer than clients' own pool expiry (httpx's is 5 s),
# so that a client never sends a request on a connection the server is closing at that moment (the request
# would fail with a dropped connection, seen as a router 503 with an empty message).
KEEP_ALIVE_SECONDS = 30


def listening_socket(port: int = 0) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` (0: one the kernel picks), inheritable. The process that starts
    a server binds its port with this and hands the socket over (Popen's `pass_fds`, the server's `--fd`). No other
    process can take the port in between. One can when a port chosen free is bound later by the child: a
    neighbour choosing the same, or an outgoing connection's local port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
