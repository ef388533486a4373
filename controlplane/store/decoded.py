"""Arrays already decoded from their blobs, kept by the blob's bytes: every reconcile pass reads a pool's last
`history_windows` windows (two blobs each), and all but the newest were decoded, unchanged, by the passes
before. Decoding them again (zlib and .npy) was most of a DeepSeek-sized pass (0.2 s of 0.5 s per read of
120 windows at 320 GPUs); looking a blob up costs hashing its bytes.

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


def unpack_for(session: Session):  # noqa: ANN201 (Callable[[bytes], np.ndarray])
    """The session's decoder: its sessionmaker's `DecodedArrays`, or a plain decode where it has none."""
    decoded = session.info.get(DECODED)
    return decoded.unpack if decoded is not None else unpack
