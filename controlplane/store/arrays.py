"""Arrays in BLOB columns as zstd-compressed .npy bytes: dtype and shape travel with the data.

Compressed because a DeepSeek-sized window is two int64 matrices of 58 x 256 and 58 x 960 (a decode pool of three
EP320 instances). Compressed, the database stays small, and PostgreSQL no longer spends its own (slower)
compression on every window it rewrites. zstd at level 1, because every post rewrites its window's blobs and it
packs faster and smaller than zlib (docs/decisions/2026-12-04-zstd-window-blobs.md).
Blobs written before (zlib, or plain .npy, which starts with the .npy magic) still read.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import zstandard

NPY_MAGIC = b"\x93NUMPY"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def pack(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return zstandard.ZstdCompressor(level=1).compress(buffer.getvalue())  # a compressor per call: thread-safe


def unpack(blob: bytes) -> np.ndarray:
    if blob.startswith(NPY_MAGIC):
        raw = blob
    elif blob.startswith(ZSTD_MAGIC):
        raw = zstandard.ZstdDecompressor().decompress(blob)
    else:
        raw = zlib.decompress(blob)
    return np.load(io.BytesIO(raw), allow_pickle=False)
