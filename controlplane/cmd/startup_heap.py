"""The controller's heap after start-up, frozen out of the garbage collector's full collections.

A started controller holds many tracked objects, and each large group post allocates thousands more. So the
collector's full (oldest generation) collection runs every few windows and walks all of them, with the
interpreter stopped and every post in flight waiting. After `gc.freeze()` a full collection walks only what was
allocated since. Objects frozen are never collected as garbage; the collection first clears what start-up left.
Measured: docs/decisions/2026-12-04-freeze-startup-heap.md.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collects start-up's garbage, then moves every object left out of the collector's view; returns how many
    were frozen. Called once a serving process has built its app and engine, before it serves."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
