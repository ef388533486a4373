"""What can be checked of helm/Dockerfile without a container engine: the paths it copies exist, its user is
the numeric non-root user the chart runs as, and its entry point and extras are the project's."""

from __future__ import annotations

import re
import tomllib

import yaml
from support.chart import CHART

ROOT = CHART.parents[1]
DOCKERFILE = (ROOT / "helm" / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    return re.findall(rf"^{name} (.+)$", DOCKERFILE, re.MULTILINE)


def test_what_it_copies_exists_and_is_not_ignored():
    ignored = (ROOT / "helm" / "Dockerfile.dockerignore").read_text().split()
    for copy in instructions("COPY"):
        *sources, _destination = copy.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert source not in ignored, source


def test_it_runs_as_the_chart_user_with_the_projects_entry_point_and_extras():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    [user] = instructions("USER")
    assert user == f"{values['podSecurityContext']['runAsUser']}:{values['podSecurityContext']['runAsGroup']}"
    assert instructions("ENTRYPOINT") == ['["moectl"]']
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "moectl" in project["scripts"]
    [extras] = re.findall(r'-e "\.\[([a-z,]+)\]"', DOCKERFILE)
    assert set(extras.split(",")) <= set(project["optional-dependencies"])
    assert instructions("FROM") == ["python:3.11-slim"]
