"""The test cluster is checked before each test that uses it: an apiserver killed between two tests is
replaced for the next one, and the run's output names the death (support/kube/fixture.py, health.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support.kube import build
from support.kube.fixture import require_built

pytestmark = [pytest.mark.kube, pytest.mark.slow]
TESTS = Path(__file__).resolve().parents[1]
KUBE_CACHE = build.cache_root()  # read before pytester moves HOME to its own temp dir

TWO_TESTS = '''
import os
import signal

from kubernetes.client import CoreV1Api


def test_1_kills_the_apiserver(kube_cluster):
    with kube_cluster.http_client(timeout=10) as api:
        assert api.get("/readyz").status_code == 200
    print("apiserver pid", kube_cluster.pids["kube-apiserver"])
    os.kill(kube_cluster.pids["kube-apiserver"], signal.SIGKILL)
    kube_cluster.processes["kube-apiserver"].wait()


def test_2_gets_a_working_cluster(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        assert CoreV1Api(admin).read_namespace(kube_namespace).metadata.name == kube_namespace
'''


def test_an_apiserver_killed_between_two_tests_is_replaced_and_named(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nmarkers =\n    kube: test cluster\n    slow: real processes\n")
    pytester.makepyfile(test_two=TWO_TESTS)
    env_path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", env_path)
        patch.setenv("MOECTL_KUBE_CACHE", str(KUBE_CACHE))
        require_built()
        result = pytester.runpytest_subprocess("-p", "support.kube.fixture", "-p", "no:cacheprovider", "-s",
                                               timeout=540)
    output = result.stdout.str()
    print(output[-3000:])
    result.assert_outcomes(passed=2)
    killed = re.search(r"apiserver pid (\d+)", output).group(1)
    assert "KubeClusterDied: the test cluster died before this test and was replaced" in output
    assert f"kube-apiserver (pid {killed}) was killed by SIGKILL" in output
