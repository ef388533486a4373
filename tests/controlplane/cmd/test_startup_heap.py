"""The serving process's start-up heap is frozen out of full collections, its garbage collected first (in a
process of its own: freezing pytest's heap would keep every earlier test's garbage)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, weakref
from controlplane.cmd.startup_heap import freeze_startup_heap

class Node:
    pass

kept, dropped = Node(), Node()
dropped.self = dropped  # a cycle only the collector frees
gone = weakref.ref(dropped)
del dropped
num_frozen = freeze_startup_heap()
young = Node()  # allocated after: tracked by the collector as usual
print(num_frozen, gc.get_freeze_count(), gone() is None, gc.is_tracked(young), len(gc.get_objects(generation=2)))
"""


def test_start_up_garbage_is_collected_and_what_is_left_frozen():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    num_frozen, freeze_count, is_collected, is_young_tracked, num_oldest = out.stdout.split()
    assert int(num_frozen) == int(freeze_count) > 1000  # the imports' objects
    assert is_collected == "True" and is_young_tracked == "True"
    assert int(num_oldest) < int(num_frozen) // 10  # a full collection no longer walks them
