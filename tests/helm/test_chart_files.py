"""The chart carries copies of the alert rules and Grafana dashboards (helm warns on symbolic links): each
copy equals its source in dashboards/, and every source has its copy."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"prometheus": ["moectl-rules.yml"],
           "grafana": sorted(p.name for p in (ROOT / "dashboards" / "grafana").glob("*.json"))}


def test_the_charts_files_are_the_dashboards_files():
    files = ROOT / "helm" / "moectl" / "files"
    copied = {kind: sorted(p.name for p in (files / kind).iterdir()) for kind in SOURCES}
    assert copied == SOURCES, "run `make chart-files`: the chart's files/ differ from dashboards/"
    for kind, names in SOURCES.items():
        for name in names:
            assert not (files / kind / name).is_symlink()
            assert (files / kind / name).read_bytes() == (ROOT / "dashboards" / kind / name).read_bytes(), \
                f"run `make chart-files`: helm/moectl/files/{kind}/{name} differs from dashboards/{kind}/{name}"
