"""The directory an engine's processes and moectl share where a plugin inside the engine picks the placement at
the engine's own rebalance (vLLM's policy plugin, $MOECTL_VLLM_STATE_DIR; SGLang's live plugin).

`load-<epoch>-<model>-<call>.json`: what the plugin saw at rebalance `call` of the engine's life `epoch`
(epoch.py) for `model` (model_key: the main model and an MTP drafter rebalance apart), one object with these
keys. `epoch`; `model`; `call`; `at` (unix seconds); `weight` [layers, num_logical] tokens (global, over the
engine's load window); `current` [layers, num_replicas], the map in force before it (or null); `num_replicas`;
`num_ranks`; `faults` {cause: count} the plugin's failures so far (faults.py); and the engine's version under its
name (vllm, sglang). Written once per call by rank 0 (every rank holds the same). vLLM's layers are its MoE
layers; SGLang's every hidden one. The newest MAX_LOADS of each model are kept; the first record of a newer epoch
removes an older epoch's records and armed placements (their call numbers mean nothing to the new process).
`placements.json`: the armed placements, [{version, from_call, epoch, model, table}], the last MAX_ARMED kept.
`counts-<rank>.json`: one vLLM worker's cumulative per-expert counts (agents/adapters/vllm/window_handoff.py),
replaced about once a second.

Every file is written whole and read only when it is a regular file of ours (private_files.py); read-modify-write
holds the directory's lock. A file that cannot be read (torn by an older writer, planted, a directory) reads as
absent: counted in `faults` and logged once, never raised into the engine.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from agents.adapters.arming import ArmedPlacement
from agents.adapters.epoch import epoch_order, is_epoch
from agents.adapters.faults import Faults
from agents.adapters.private_files import locked, private_dir, read_ours, write_atomic

MAX_ARMED = 4
MAX_LOADS = 64  # records kept a model (one a rearrange: hours of them at vLLM's 3000-step interval)
ARMED_FILE = "placements.json"
_LOAD_NAME = re.compile(r"^load-(?P<epoch>[0-9a-f.]+)-(?P<model>\d+x\d+)-(?P<call>\d+)\.json$")

Position = tuple[str, int]  # (epoch, call): where a reader stopped


def model_key(num_layers: int, num_experts: int) -> str:
    """The key of a model's records and placements: its [layers, logical experts] shape (an MTP drafter has 1)."""
    return f"{int(num_layers)}x{int(num_experts)}"


def default_dir(engine: str) -> Path:
    """Not under world-writable /tmp: $XDG_RUNTIME_DIR (the user's own) when set, else ~/.cache/moectl."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "moectl")
    return Path(base) / f"moectl-{engine}-state"


def _order(epoch: str, call: int) -> tuple[int, str, int]:
    return epoch_order(epoch), epoch, call


def _load_files(directory: Path) -> list[tuple[tuple[int, str, int], str, Path]]:
    """[(order, model, path)] of the load records named in `directory`, oldest first."""
    out = []
    for path in directory.iterdir():
        match = _LOAD_NAME.match(path.name)
        if match and is_epoch(match["epoch"]):
            out.append((_order(match["epoch"], int(match["call"])), match["model"], path))
    return sorted(out, key=lambda entry: entry[0])


def _read_json(path: Path, faults: Faults | None) -> object | None:
    try:
        return json.loads(read_ours(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # torn, planted, not a file: absent
        if faults is not None:
            faults.record(f"unreadable {path.name.split('-')[0]}", exc)
        return None


def write_load(directory: Path, record: dict) -> None:
    """Writes `record` (keys in the module's docstring; epoch, model and call required), then prunes. Raises
    OSError when the directory cannot be written: the plugin's guard counts it."""
    directory = private_dir(Path(directory))
    epoch, model, call = record["epoch"], record["model"], int(record["call"])
    if not is_epoch(epoch) or not re.fullmatch(r"\d+x\d+", model):
        raise ValueError(f"load record: epoch {epoch!r} or model {model!r} malformed")
    with locked(directory):
        write_atomic(directory / f"load-{epoch}-{model}-{call:08d}.json",
                     json.dumps(record, separators=(",", ":")).encode())
        files = _load_files(directory)
        newest = max(order[0] for order, _, _ in files)
        kept: dict[str, int] = {}
        for order, key, path in reversed(files):
            kept[key] = kept.get(key, 0) + (order[0] == newest)
            if order[0] < newest or kept[key] > MAX_LOADS:
                path.unlink(missing_ok=True)
        armed = _read_armed(directory, None)
        if any(epoch_order(a.epoch) < newest for a in armed):
            _write_armed(directory, [a for a in armed if epoch_order(a.epoch) >= newest])


def read_loads(directory: Path, after: Position | None = None, *, model: str | None = None,
               max_records: int = MAX_LOADS, faults: Faults | None = None) -> list[dict]:
    """The records after `after` (of `model`; None: every model), oldest first, the newest `max_records` of them.
    Reads only those files; an unreadable one is skipped (counted in `faults`)."""
    directory = Path(directory)
    try:
        files = _load_files(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if faults is not None:
            faults.record("unreadable state directory", exc)
        return []
    start = None if after is None else _order(*after)
    chosen = [path for order, key, path in files
              if (model is None or key == model) and (start is None or order > start)][-max_records:]
    out = []
    for path in chosen:
        record = _read_json(path, faults)
        if isinstance(record, dict) and {"epoch", "model", "call", "weight"} <= record.keys():
            out.append(record)
        elif record is not None and faults is not None:
            faults.record("unreadable load", f"{path.name}: not a load record")
    return out


def read_newest(directory: Path, *, faults: Faults | None = None) -> dict[str, dict]:
    """model -> its newest record of the newest epoch; reads one file a model."""
    try:
        files = _load_files(Path(directory))
    except OSError:
        return {}
    if not files:
        return {}
    newest_epoch = files[-1][0][1]
    newest: dict[str, Path] = {key: path for order, key, path in files if order[1] == newest_epoch}
    out = {}
    for key, path in newest.items():
        record = _read_json(path, faults)
        if isinstance(record, dict) and {"epoch", "model", "call", "weight"} <= record.keys():
            out[key] = record
    return out


def _entry(raw: object) -> ArmedPlacement:
    """Raises (KeyError, TypeError, ValueError) when `raw` is not an armed placement."""
    table = np.asarray(raw["table"], dtype=np.int64)  # ragged rows raise ValueError
    if table.ndim != 2 or not is_epoch(raw["epoch"]) or not isinstance(raw["model"], str):
        raise ValueError("table not 2-D, or epoch/model malformed")
    return ArmedPlacement(int(raw["version"]), int(raw["from_call"]), table, raw["epoch"], raw["model"])


def _read_armed(directory: Path, faults: Faults | None) -> list[ArmedPlacement]:
    raw = _read_json(Path(directory) / ARMED_FILE, faults)
    if raw is None:
        return []
    if not isinstance(raw, list):
        if faults is not None:
            faults.record("unreadable placements", f"{ARMED_FILE}: not a list")
        return []
    out = []
    for entry in raw:
        try:
            out.append(_entry(entry))
        except (KeyError, TypeError, ValueError) as exc:
            if faults is not None:
                faults.record("unreadable placement entry", f"{ARMED_FILE}: {exc!r}")
    return out


def read_armed(directory: Path, *, faults: Faults | None = None) -> list[ArmedPlacement]:
    """The armed placements, oldest first; [] when none or unreadable, an entry that does not parse left out."""
    return _read_armed(directory, faults)


def _write_armed(directory: Path, armed: list[ArmedPlacement]) -> None:
    entries = [{"version": a.version, "from_call": a.from_call, "epoch": a.epoch, "model": a.model,
                "table": np.asarray(a.table).tolist()} for a in armed[-MAX_ARMED:]]
    write_atomic(Path(directory) / ARMED_FILE, json.dumps(entries, separators=(",", ":")).encode())


def write_armed(directory: Path, armed: list[ArmedPlacement]) -> None:
    """Replaces the armed placements with `armed` (the last MAX_ARMED), under the directory's lock."""
    directory = private_dir(Path(directory))
    with locked(directory):
        _write_armed(directory, armed)


def arm(directory: Path, entry: ArmedPlacement) -> list[ArmedPlacement]:
    """Adds `entry` to the armed placements under the lock (read, change, write: no writer's entry lost), dropping
    an older epoch's and any of the same version, model and epoch. Returns what is armed now."""
    directory = private_dir(Path(directory))
    with locked(directory):
        kept = [a for a in _read_armed(directory, None) if epoch_order(a.epoch) >= epoch_order(entry.epoch)
                and not (a.version == entry.version and a.model == entry.model and a.epoch == entry.epoch)]
        armed = [*kept, entry][-MAX_ARMED:]
        _write_armed(directory, armed)
        return armed


def write_counts(directory: Path, rank: int, record: dict) -> None:
    """Replaces worker `rank`'s counts record. Raises OSError when the directory cannot be written (the reader
    thread logs it and tries again next time)."""
    directory = private_dir(Path(directory))
    write_atomic(directory / f"counts-{int(rank):04d}.json", json.dumps(record, separators=(",", ":")).encode())


def read_counts(directory: Path, *, faults: Faults | None = None) -> list[dict]:
    """Every worker's newest counts record, by rank; an unreadable one is left out (counted in `faults`)."""
    try:
        paths = sorted(p for p in Path(directory).iterdir() if re.fullmatch(r"counts-\d{4,}\.json", p.name))
    except OSError:
        return []
    return [r for r in (_read_json(p, faults) for p in paths) if isinstance(r, dict)]
