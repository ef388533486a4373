"""The entry points vLLM loads moectl's plugin by (pyproject.toml) name the groups vLLM reads and objects that
exist: the policy's `register` and an EndpointPlugin factory with the protocol's members."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

from agents.adapters.vllm import names

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def _resolve(target: str) -> object:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def test_both_groups_point_at_what_vllm_calls():
    entry_points = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
    assert callable(_resolve(entry_points[names.GENERAL_PLUGINS]["moectl"]))
    plugin = _resolve(entry_points[names.ENDPOINT_PLUGINS]["moectl"])()
    assert plugin.name == "moectl" and plugin.required_tasks is None
    assert callable(plugin.attach_router) and callable(plugin.init_state)
