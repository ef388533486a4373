"""A worker rank whose group-limited top-k silently takes the unconstrained path, as in a production incident:
the limit is configured, the engine is handed it, and the routing op ignores it. Nothing fails; only the
groups and nodes each token reaches tell. Run exactly like `python -m agents.worker` (a rank: `--rank R`).
"""

from __future__ import annotations

import sys

from agents.runtime import kernels
from agents.worker.main import main


def bypass_group_limit() -> None:
    """Every routing call of this process gets topk_group = num_groups, whatever the engine passes."""
    ops = kernels.torch_ops()  # the backend the CPU runtime routes with (one cached namespace per process)
    limited = ops.grouped_topk

    def unconstrained(scores, bias, num_groups, topk_group, *args, **kwargs):
        return limited(scores, bias, num_groups, num_groups, *args, **kwargs)

    ops.grouped_topk = unconstrained


if __name__ == "__main__":
    bypass_group_limit()
    sys.exit(main())
