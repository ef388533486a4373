"""The entry points vLLM and SGLang load moectl's plugins by (pyproject.toml) name the groups they read and objects
that exist: vLLM's policy `register` and EndpointPlugin factory, SGLang's live plugin `register` (no-op unless
asked)."""

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


def test_the_sglang_plugin_entry_point_does_nothing_unless_asked(monkeypatch):
    monkeypatch.delenv("MOECTL_SGLANG_STATE_DIR", raising=False)
    register = _resolve(tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["sglang.srt.plugins"]["moectl"])
    assert register() is None  # returns before importing SGLang (not installed here)
