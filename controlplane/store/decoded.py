"""Arrays already decoded from their blobs, kept by the blob's bytes.

Every reconcile pass reads a pool's last `history_windows` windows (two blobs each), and all but the newest were
decoded, unchanged, by the passes before. Decoding them again (zlib and .npy) would be most of a DeepSeek-sized
pass (docs/decisions/2026-12-04-keep-decoded-blobs.md); looking a blob up costs hashing its bytes.

Kept by content, not by row: a window that got another report has other bytes, and a row id SQLite hands out
again after a deletion can never return another row's arrays. The arrays are read-only (they are shared by
every reader); least recently used ones go past `max_bytes`. One per sessionmaker (`store.db.make_sessions`),
found in `session.info[DECODED]`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from sqlalchemy.orm import Session

from controlplane.store.arrays import unpack

DECODED = "moectl.decoded_arrays"
WRITTEN = "moectl.written_windows"
MAX_BYTES = 256 * 2**20  # two DeepSeek pools' 120 windows are ~65 MB decoded


class DecodedArrays:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes, self.num_bytes = max_bytes, 0
        self._arrays: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def unpack(self, blob: bytes) -> np.ndarray:
        """The array `blob` holds (store.arrays.unpack), read-only."""
        with self._lock:
            array = self._arrays.get(blob)
            if array is not None:
                self._arrays.move_to_end(blob)
                return array
        array = unpack(blob)
        array.flags.writeable = False
        with self._lock:
            if blob not in self._arrays:
                self._arrays[blob] = array
                self.num_bytes += array.nbytes + len(blob)
            while self.num_bytes > self.max_bytes and self._arrays:
                old_blob, old = self._arrays.popitem(last=False)
                self.num_bytes -= old.nbytes + len(old_blob)
        return array


class WrittenArrays:
    """The arrays this process last packed into each of the few newest windows' blobs, kept by the blob's bytes.

    The pool's next post of the window reads that blob back (its read-modify-write). When no other process
    wrote the row meanwhile, it finds the bytes it wrote and skips their zlib and .npy decode (two a post;
    docs/decisions/2026-12-04-skip-decoding-own-blobs.md). A row another process wrote has other bytes and is
    decoded as before.
    Bounded to `max_windows` (pool, window) keys; what it hands out is a copy, free to change."""

    def __init__(self, max_windows: int = 8):
        self.max_windows = max_windows
        self._by_window: OrderedDict[tuple[int, int], dict[bytes, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def unpack(self, key: tuple[int, int], blob: bytes) -> np.ndarray:
        """A writable array of `blob` (store.arrays.unpack), from what was kept for `key` where the bytes match."""
        with self._lock:
            array = self._by_window.get(key, {}).get(blob)
        return array.copy() if array is not None else unpack(blob)

    def keep(self, key: tuple[int, int], written: dict[bytes, np.ndarray]) -> None:
        """Keeps what was just packed for `key` (blob -> the array it holds), in place of what was kept before."""
        kept = {blob: np.array(array, copy=True) for blob, array in written.items()}
        with self._lock:
            self._by_window.pop(key, None)
            self._by_window[key] = kept
            while len(self._by_window) > self.max_windows:
                self._by_window.popitem(last=False)


def unpack_for(session: Session):  # noqa: ANN201 (Callable[[bytes], np.ndarray])
    """The session's decoder: its sessionmaker's `DecodedArrays`, or a plain decode where it has none."""
    decoded = session.info.get(DECODED)
    return decoded.unpack if decoded is not None else unpack
