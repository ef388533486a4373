"""Arrays on the wire: dtype, shape and the little-endian bytes, zlib-compressed and base64 encoded.

A [58, 256] int64 load matrix is ~120 kB raw and a few kB on the wire, where a JSON list of numbers would be
~400 kB and slow to parse.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from agents.protocol.wire import MAX_COUNT, _Frozen

_DTYPES = {"int64": np.dtype("<i8"), "float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
MAX_ARRAY_ELEMENTS = 16_000_000  # 58 layers x 288 slots x 320 GPUs fits with room


class Array(_Frozen):
    """A numeric array on the wire: `data` is base64(zlib(little-endian C-order bytes))."""

    dtype: Literal["int64", "float32", "float64"]
    shape: tuple[int, ...] = Field(max_length=8)
    data: str

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> Array:
        array = np.asarray(array)
        kind = "int64" if array.dtype.kind in "iub" else ("float32" if array.dtype == np.float32 else "float64")
        raw = np.ascontiguousarray(array, dtype=_DTYPES[kind]).tobytes()
        return cls(dtype=kind, shape=array.shape, data=base64.b64encode(zlib.compress(raw, 1)).decode())

    @model_validator(mode="after")
    def _check_size(self) -> Array:
        if any(d < 0 for d in self.shape):
            raise ValueError(f"array shape {list(self.shape)} has a negative dimension")
        if any(d > MAX_ARRAY_ELEMENTS for d in self.shape) or \
                int(np.prod(self.shape, dtype=np.int64)) > MAX_ARRAY_ELEMENTS:
            raise ValueError(f"array shape {list(self.shape)} exceeds {MAX_ARRAY_ELEMENTS} elements")
        return self

    def to_numpy(self) -> np.ndarray:
        """Decodes and checks that the bytes match dtype and shape; raises ValueError otherwise."""
        dtype = _DTYPES[self.dtype]
        expected = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        try:
            # max_length bounds a zip bomb: never inflate past what the shape promises
            inflater = zlib.decompressobj()
            raw = inflater.decompress(base64.b64decode(self.data, validate=True), expected + 1)
        except (binascii.Error, zlib.error) as exc:
            raise ValueError(f"array data is not base64(zlib(bytes)): {exc}") from None
        if len(raw) != expected:
            raise ValueError(f"array data holds {len(raw)} bytes, shape {list(self.shape)} "
                             f"of {self.dtype} needs {expected}")
        return np.frombuffer(raw, dtype=dtype).reshape(self.shape)


def check_counts(name: str, array: Array, shape: tuple[int, int]) -> None:
    """A load array of counts: its shape, and every element finite, non-negative and at most MAX_COUNT."""
    if tuple(array.shape) != shape:
        raise ValueError(f"{name} has shape {list(array.shape)}, the model needs {list(shape)}")
    values = array.to_numpy()
    if not np.isfinite(values).all():
        raise ValueError(f"{name} holds non-finite values")
    if (values < 0).any():
        raise ValueError(f"{name} holds negative counts")
    if (values > MAX_COUNT).any():
        raise ValueError(f"{name} holds counts over {MAX_COUNT} (2^40), more than one rank sees in a window")
