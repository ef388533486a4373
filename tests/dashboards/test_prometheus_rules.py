"""The shipped Prometheus rules are valid and do what their unit tests say (promtool, Debian `prometheus`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.servers import require_binary

RULES = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus"


def test_rules_are_valid_and_pass_their_unit_tests():
    promtool = require_binary("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "rules", "moectl-rules.yml"], cwd=RULES, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run([promtool, "test", "rules", "moectl-rules.test.yml"], cwd=RULES, capture_output=True,
                            text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
