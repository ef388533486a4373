"""Where the sidecar keeps the placement file SGLang starts from, and which version it is.

The file holds `physical_to_logical_map` alone (SGLang's loader takes no other key), so its placement version
and the moment it was written sit beside it (`placement.meta.json`). A server that started after that moment
loaded it (it reads the file at start only); one that started before runs the version before.
`DirectoryStore` writes both into a directory SGLang reads (`--init-expert-location DIR/placement.json`);
on Kubernetes a ConfigMap mounted there (restart.py's KubeConfigMapStore) survives the pod's restart.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
    if PLACEMENT_FILE not in files or META_FILE not in files:
        return None
    meta = json.loads(files[META_FILE])
    return StoredPlacement(int(meta["version"]), int(meta["previous"]), float(meta["written_at"]),
                           json.loads(files[PLACEMENT_FILE]))


class DirectoryStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def read(self) -> StoredPlacement | None:
        files = {name: (self.directory / name).read_text() for name in (PLACEMENT_FILE, META_FILE)
                 if (self.directory / name).exists()}
        return decode(files)

    def write(self, placement: StoredPlacement) -> None:
        """The placement first, then its meta, each replaced whole (a reader never sees half a file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, text in encode(placement).items():
            temporary = self.directory / f".{name}.tmp"
            temporary.write_text(text)
            os.replace(temporary, self.directory / name)
