"""HTTP between the parts: what servers (worker ranks, router, controller) promise the clients that keep
connections to them (agents posting snapshots, the router, the load generator, people's tools)."""

# An idle kept-alive connection's life on every server: longer than clients' own pool expiry (httpx's is 5 s),
# so that a client never sends a request on a connection the server is closing at that moment (the request
# would fail with a dropped connection, seen as a router 503 with an empty message).
KEEP_ALIVE_SECONDS = 30
