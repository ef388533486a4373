"""Writes the values reference of helm/moectl/README.md from values.schema.json (descriptions, types) and
values.yaml (defaults), between the README's `values:start` and `values:end` markers.

  python helm/values_doc.py           rewrite the table
  python helm/values_doc.py --check   exit 1 when the README's table is not what the schema says
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "moectl"
START, END = "<!-- values:start -->", "<!-- values:end -->"


def rows(schema: dict, defaults: object, path: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for each documented key, depth first; an object the chart owns
    (closed: additionalProperties false) is expanded, a free-form one (a Kubernetes object) is one row."""
    found = []
    for name, prop in schema.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        default = defaults.get(name) if isinstance(defaults, dict) else None
        if prop.get("type") == "object" and prop.get("additionalProperties") is False:
            if path:  # the top level's sections have no row of their own
                found.append((key, "object", "", prop.get("description", "")))
            found.extend(rows(prop, default, key))
            continue
        items = prop.get("items", {})
        if prop.get("type") == "array" and items.get("additionalProperties") is False and "properties" in items:
            found.append((key, "array", "", prop.get("description", "")))
            found.extend(rows(items, None, f"{key}[]"))
            continue
        kind = prop.get("type", "")
        if "enum" in prop:
            kind = " \\| ".join(f"`{v}`" for v in prop["enum"])
        shown = "" if default in (None, "", {}, []) else f"`{json.dumps(default)}`"
        found.append((key, kind, shown, prop.get("description", "")))
    return found


def table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, kind, default, text in rows(schema, defaults):
        escaped = text.replace("|", "\\|")
        lines.append(f"| `{key}` | {kind} | {default} | {escaped} |")
    return "\n".join(lines)


def with_table(readme: str) -> str:
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    path = CHART / "README.md"
    current = path.read_text()
    wanted = with_table(current)
    if "--check" in argv:
        if current != wanted:
            print(f"{path} is stale: run python helm/values_doc.py")
            return 1
        return 0
    path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
