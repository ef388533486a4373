"""Where the sidecar keeps the placement file SGLang starts from, and which version it is.

The file holds `physical_to_logical_map` alone (SGLang's loader takes no other key), so its placement version
and the moment it was written sit beside it (`placement.meta.json`). A server that started after that moment
loaded it (it reads the file at start only); one that started before runs the version before.
`DirectoryStore` writes both into a directory SGLang reads (`--init-expert-location DIR/placement.json`);
on Kubernetes a ConfigMap mounted there (restart.py's KubeConfigMapStore) survives the pod's restart.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agents.adapters.private_files import read_ours, write_atomic

log = logging.getLogger("moectl.adapter.sglang")

PLACEMENT_FILE = "placement.json"
META_FILE = "placement.meta.json"


@dataclass(frozen=True)
class StoredPlacement:
    """version: the placement version of the file; previous: the one before it; written_at: unix seconds."""

    version: int
    previous: int
    written_at: float
    document: dict


class PlacementStore(Protocol):
    def read(self) -> StoredPlacement | None: ...

    def write(self, placement: StoredPlacement) -> None: ...


def encode(placement: StoredPlacement) -> dict[str, str]:
    """The two files' contents, by name."""
    meta = {"version": placement.version, "previous": placement.previous, "written_at": placement.written_at}
    return {PLACEMENT_FILE: json.dumps(placement.document, separators=(",", ":")), META_FILE: json.dumps(meta)}


def decode(files: dict[str, str]) -> StoredPlacement | None:
    """The stored placement; None when there is none or it cannot be read (an empty or torn file left by a crash:
    a sidecar that refused to start on it would crash-loop; the server then runs what it started with)."""
    if PLACEMENT_FILE not in files or META_FILE not in files:
        return None
    try:
        meta = json.loads(files[META_FILE])
        document = json.loads(files[PLACEMENT_FILE])
        if not isinstance(document, dict):
            raise TypeError(f"{PLACEMENT_FILE} is not an object")
        return StoredPlacement(int(meta["version"]), int(meta["previous"]), float(meta["written_at"]), document)
    except (ValueError, KeyError, TypeError) as exc:
        log.error("the stored placement cannot be read (%s): taken as none", exc)
        return None


class DirectoryStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def read(self) -> StoredPlacement | None:
        files = {}
        for name in (PLACEMENT_FILE, META_FILE):
            try:
                files[name] = read_ours(self.directory / name).decode()
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as exc:
                log.error("the stored placement cannot be read (%s): taken as none", exc)
                return None
        return decode(files)

    def write(self, placement: StoredPlacement) -> None:
        """The placement first, then its meta, each replaced whole and fsynced (private_files.py): after a crash
        the meta names a file that is there."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, text in encode(placement).items():
            write_atomic(self.directory / name, text.encode())
