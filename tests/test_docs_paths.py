"""Every repository path a `.py` or `.md` file names exists, and none points outside the repository.

What counts as a path: a token that starts with a top-level folder of the repository (`controlplane/plan/x.py`,
`docs/reference/`), and a `../` path: in a `.md` file relative to it (a markdown link's target too), in a `.py`
file always outside (its paths are written from the root). A token right after `/`, `.` or a word character is
part of something else (a URL, another repository's path, a file's name), not a path of ours. `*`, `<name>` and
`{a,b}` in a name are globs: some file must match.

Dated records (benchmarks/results/*-YYYY-MM-DD*.md, docs/decisions/YYYY-MM-DD-*.md) name the tree of their day:
a file they name may have moved or gone since (`git log --follow` finds it), so only their `../` paths are checked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_DIRS = ("agents", "benchmarks", "controlplane", "dashboards", "docs", "helm", "migrations", "tests")
NAME = r"[\w.*<>{},/-]"
ROOTED = re.compile(rf"(?<![\w./-])(?:{'|'.join(TOP_DIRS)})/{NAME}*")
UP = re.compile(rf"(?<![\w./-])(?:\.\./)+{NAME}+")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DATED_RECORD = re.compile(r"(benchmarks/results/.*-|docs/decisions/)\d{4}-\d{2}-\d{2}[^/]*\.md$")
# files whose paths are data, not references: a test that a path traversal is refused, and this file's plants
NOT_REFERENCES = {"tests/dashboards/test_web_api.py", "tests/test_docs_paths.py"}


def named_paths(text: str, source: str) -> list[tuple[str, str]]:
    """(as written, repository-relative path) for each path `text` names; `source`: the naming file's path."""
    here = Path(source).parent if source.endswith(".md") else Path()
    found = [(m, m) for m in ROOTED.findall(text)]
    found += [(m, (here / m).as_posix()) for m in UP.findall(text)]
    if source.endswith(".md"):
        found += [(m, (here / m.split("#")[0]).as_posix()) for m in LINK.findall(text)
                  if not re.match(r"[a-z]+:|#|/", m) and m.split("#")[0]]
    return [(written, path.rstrip(".,:;")) for written, path in found]


def problem(path: str, root: Path, is_dated: bool = False) -> str | None:
    """Why `path` (relative to `root`, may hold `..` and globs) is not a file of the repository; None when it is.
    `is_dated`: named by a dated record, where only a path outside the repository is wrong."""
    resolved = Path(*_normalised(path))
    if resolved.parts[:1] == ("..",):
        return "points outside the repository"
    if is_dated:
        return None
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", resolved.as_posix())
    if "*" in pattern:
        return None if next(root.glob(pattern), None) else "matches no file"
    return None if (root / resolved).exists() else "does not exist"


def _normalised(path: str) -> list[str]:
    parts: list[str] = []
    for part in Path(path).parts:
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part != ".":
            parts.append(part)
    return parts or ["."]


def tracked_texts() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py", "*.md"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in out.splitlines() if (ROOT / name).is_file() and name not in NOT_REFERENCES]


def test_every_named_path_is_a_file_of_the_repository():
    bad = [f"{source}: `{written}` {why}"
           for source in tracked_texts()
           for written, path in named_paths((ROOT / source).read_text(encoding="utf-8"), source)
           if (why := problem(path, ROOT, is_dated=bool(DATED_RECORD.search(source))))]
    assert not bad, "stale or outside paths (fix the doc, or the name):\n" + "\n".join(bad)


@pytest.mark.parametrize(("text", "source", "why"), [
    ("see `controlplane/plan/no_such.py`", "README.md", "does not exist"),
    ("(../shared/docs/notes/x.md)", "agents/adapters/coverage.py", "points outside the repository"),
    ("`../shared/docs/DESIGN.md`", "README.md", "points outside the repository"),
    ("[notes](../../../notes.md)", "docs/reference/x.md", "points outside the repository"),
    ("`benchmarks/results/no-such-*.md`", "README.md", "matches no file"),
    ("[Back](../../README.md)", "docs/reference/x.md", None),
    ("`benchmarks/results/closed-loop-*.md` and `tests/<area>/test_<name>.py`", "README.md", None),
    ("https://github.com/x/y/docs/a.md, ai-dynamo/dynamo/docs/b.md, my_docs/c.md", "README.md", None),
])
def test_the_extractor_flags_a_planted_bad_path(text, source, why):
    problems = [problem(path, ROOT) for _, path in named_paths(text, source)]
    if why is None:
        assert not any(problems), problems
    else:
        assert why in problems, problems


def test_a_dated_record_may_name_a_moved_file_but_not_one_outside():
    assert DATED_RECORD.search("benchmarks/results/pools-2026-11-30.md")
    assert DATED_RECORD.search("docs/decisions/2026-12-04-one-knob-version-table.md")
    assert not DATED_RECORD.search("docs/reference/loop.md")
    assert problem("controlplane/plan_pools.py", ROOT, is_dated=True) is None
    assert problem("../shared/x.md", ROOT, is_dated=True) == "points outside the repository"
