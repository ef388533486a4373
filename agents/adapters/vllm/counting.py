"""The counting half of the `vllm.general_plugins` entry point (policy.register calls it in every vLLM process).

Installs the per-expert counter (expert_counts.py); its reader thread (window_handoff.py) starts in the process
that counts first (a worker), not in the API server. Off with MOECTL_VLLM_COUNTING=0. Refuses a vLLM version
whose code it was not checked against (names.SUPPORTED_VERSIONS), with a message saying which are.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agents.adapters.vllm import names
from agents.adapters.vllm.expert_counts import ExpertCounter, install
from agents.adapters.vllm.window_handoff import start_reader

log = logging.getLogger("moectl.adapter.vllm")


def unsupported(version: str) -> str | None:
    """None where the plugins support vLLM `version`, else the message saying what to do."""
    if version in names.SUPPORTED_VERSIONS:
        return None
    return (f"moectl's vLLM plugins support vLLM {', '.join(names.SUPPORTED_VERSIONS)}, not {version}: nothing "
            f"installed (vLLM runs without moectl); install a supported vLLM or a moectl that supports {version}")


def register_counting(state_dir: Path, version: str) -> ExpertCounter | None:
    if os.environ.get(names.COUNTING_ENV, "1") == "0":
        return None
    seconds = float(os.environ.get(names.COUNT_SECONDS_ENV, "1.0"))
    counter = ExpertCounter(on_first=lambda c: start_reader(c, state_dir, seconds=seconds, version=version))
    return counter if install(counter) else None
