"""`moectl worker`: one runtime instance, an EP group of rank processes, each with its engine, its agent,
the internal API the router calls and `/metrics`."""
