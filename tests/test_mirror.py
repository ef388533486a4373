"""tests/ mirrors the packages: each module of controlplane/ and agents/ has its tests in the mirrored folder
(`controlplane/plan/pacing.py` -> `tests/controlplane/plan/`): a file there named after it (`test_pacing.py`), or
one there (or below) that imports it, or it is a helper tested through a module so covered that imports it, in the
same stage (solve/placement/moves.py through solver.py's tests). A folder or module
whose tests live elsewhere is on `ELSEWHERE`, with where they are and why.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("controlplane", "agents")
# module or folder -> where its tests are instead, and why not in the mirrored folder. Folders first.
ELSEWHERE: dict[str, str] = {
    "agents/adapters/": "tests/adapters/: the engine adapters' tests run the engines (tests/support/engines/) and "
                        "have their own folder, not yet moved under tests/agents/",
    "agents/protocol/": "tests/contract/: the wire contract, tested from both sides (the agents' and the controller's)",
    "agents/runtime/kernels/": "tests/agents/runtime/kernels/ reaches them through the backend registry "
                               "(`kernels.get_ops`), by name, not by import",
    "agents/worker/": "tests/agents/worker/ runs the worker as a process (its entry point), not by import",
    "agents/processes.py": "tests/support/servers.py and the adapters' tests start every process through it",
    "agents/sim/workloads.py": "tests/benchmarks/test_closed_loop_benchmark.py, through the benchmark it drives",
    "controlplane/cmd/cli.py": "tests/controlplane/cmd/test_cli_agent_commands.py runs `moectl` as a process",
    "controlplane/cmd/status.py": "tests/controlplane/api/test_deployments_api.py and "
                                  "tests/controlplane/loop/test_reconcile_pools.py render what it shows",
    "controlplane/store/change_costs.py": "tests/controlplane/loop/test_placement_price_loop.py: the costs the pass "
                                          "folds and stores",
    "controlplane/cmd/tokens.py": "`moectl token`, run by tests/controlplane/cmd/test_up.py's controller",
    "controlplane/actuate/pool_pass.py": "the pass's write phase: tests/controlplane/loop/",
    "controlplane/actuate/scale.py": "tests/support/scaling.py's pool scaler, in tests/controlplane/loop/ and "
                                     "tests/kube/",
    "controlplane/collect/serving.py": "the serving windows' posts: tests/controlplane/api/",
    "controlplane/leader/campaign.py": "tests/controlplane/leader/test_two_controllers.py, through the controller",
    "controlplane/store/audit.py": "the audit trail of every mutating call: tests/controlplane/api/",
    "controlplane/store/pool_plans.py": "tests/controlplane/loop/test_reconcile_pools.py",
    "controlplane/store/serving.py": "the serving windows stored and read: tests/controlplane/api/ and "
                                     "tests/controlplane/loop/test_reconcile_pools.py",
    "controlplane/store/tokens.py": "the API's tokens: tests/controlplane/api/",
}


def modules() -> list[Path]:
    """Every module of the packages but the packages' own __init__ and __main__ (repository-relative)."""
    return sorted(p.relative_to(ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def dotted(module: Path) -> str:
    return ".".join(module.with_suffix("").parts)


def imports(text: str, module: Path) -> bool:
    """`text` imports `module` (`from a.b import c`, `import a.b.c`, `from a.b.c import x`)."""
    name, parent, stem = re.escape(dotted(module)), re.escape(dotted(module.parent)), re.escape(module.stem)
    text = re.sub(r"import \(([^)]*)\)", lambda m: "import " + " ".join(m.group(1).split()), text)
    return re.search(rf"^\s*(?:from {name} import|import {name}\b|from {parent} import [^\n]*\b{stem}\b)", text,
                     re.M) is not None


def is_tested_directly(module: Path) -> bool:
    folder = ROOT / "tests" / module.parent
    return (folder / f"test_{module.stem}.py").is_file() or any(
        imports(t.read_text(encoding="utf-8"), module) for t in folder.rglob("test_*.py"))


def covered() -> set[Path]:
    """Tested directly, or imported by a covered module of the same stage (`controlplane/api/app.py` mounts
    `controlplane/api/routes/`, which import `controlplane/api/overview.py`): its helper, tested through it."""
    texts = {m: (ROOT / m).read_text(encoding="utf-8") for m in modules()}
    done = {m for m in texts if is_tested_directly(m)}

    def is_same_stage(d: Path, m: Path) -> bool:
        return len(d.parts) > 2 and d.parts[:2] == m.parts[:2]

    while True:
        more = {m for m in texts if m not in done and any(is_same_stage(d, m) and imports(texts[d], m) for d in done)}
        if not more:
            return done
        done |= more


def is_excused(module: Path) -> bool:
    return any(is_excused_by(module, e) for e in ELSEWHERE)


def test_every_module_has_its_tests_in_the_mirrored_folder():
    done = covered()
    missing = [m.as_posix() for m in modules() if m not in done and not is_excused(m)]
    assert not missing, ("modules with no test in their mirrored folder (tests/ + its package path + "
                         "test_<module>.py), or add the module to ELSEWHERE with where its tests are and why:\n"
                         + "\n".join(missing))


def test_the_list_of_exceptions_is_true():
    """Each exception names a module or folder that exists and is not all covered in its mirrored folder."""
    done = covered()
    stale = [e for e in ELSEWHERE if not (ROOT / e).exists()
             or all(m in done for m in modules() if is_excused_by(m, e))]
    assert not stale, f"remove from ELSEWHERE: {stale}"


def is_excused_by(module: Path, entry: str) -> bool:
    return module.as_posix() == entry or module.as_posix().startswith(entry.rstrip("/") + "/")
