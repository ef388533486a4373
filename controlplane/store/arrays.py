"""Arrays in BLOB columns as .npy bytes: dtype and shape travel with the data."""

from __future__ import annotations

import io

import numpy as np


def pack(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def unpack(blob: bytes) -> np.ndarray:
    return np.load(io.BytesIO(blob), allow_pickle=False)
