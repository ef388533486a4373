"""`python -m agents.adapters sglang|vllm ...` (what `moectl adapter ...` runs)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("sglang", "vllm"):
        print("usage: moectl adapter sglang|vllm --help", file=sys.stderr)
        return 2
    if argv[0] == "sglang":
        from agents.adapters.sglang.main import main as run
    else:
        from agents.adapters.vllm.main import main as run
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
