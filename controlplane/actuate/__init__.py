"""Actuate: the only writer of changes. Every knob (placement, routing limit, and later pool size) is
changed the same way: an action row, and when applied a new version row naming it, under one rule of
one action in flight per pool and knob. `agents` turns the latest versions into the snapshot response."""
