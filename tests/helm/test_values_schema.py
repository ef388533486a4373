"""The chart's values schema and the controller agree: every `controller.settings` key is a real setting, every
setting reaches the controller (through `controller.settings` or the chart's own env), and the values reference
in the chart's README is the one the schema generates."""

from __future__ import annotations

import json
import re

from support.chart import CHART

from controlplane.config import Settings
from helm import values_doc

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
SETTINGS = SCHEMA["properties"]["controller"]["properties"]["settings"]["properties"]


def env_name(camel: str) -> str:
    return "MOECTL_" + re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def test_every_settings_key_is_a_setting_the_controller_reads():
    for key, prop in SETTINGS.items():
        name = env_name(key)
        assert name.removeprefix("MOECTL_").lower() in Settings.model_fields, f"{key}: no such setting"
        assert prop["description"].startswith(f"{name}:"), key


def test_every_setting_reaches_the_controller():
    # what the chart sets itself (database URL, host, port, tokens, the pod's identity, the Lease, the targets)
    from_chart = set(re.findall(r"\bMOECTL_[A-Z_]+[A-Z]", (CHART / "templates" / "deployment.yaml").read_text()))
    settable = {env_name(key) for key in SETTINGS}
    assert not settable & from_chart, "set by the chart's own env and by controller.settings both"
    missing = {f"MOECTL_{field.upper()}" for field in Settings.model_fields} - settable - from_chart
    assert not missing, f"settings the chart cannot set: add them to controller.settings in {CHART}/values.schema.json"

def test_the_readme_values_table_is_generated_from_the_schema():
    readme = (CHART / "README.md").read_text()
    assert readme == values_doc.with_table(readme), "stale: run python helm/values_doc.py"
    for key in ("controller.settings.windowSeconds", "pools.decode.managed", "scaleTargets[].apiVersion"):
        assert f"| `{key}` |" in readme


def test_every_schema_object_the_chart_owns_is_closed():
    def visit(node: dict, path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or '(top)'} accepts unknown keys"
            for name, prop in node["properties"].items():
                visit(prop, f"{path}.{name}")
        if node.get("type") == "array":
            visit(node.get("items", {}), f"{path}[]")

    visit(SCHEMA, "")
