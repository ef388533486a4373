import io
import zlib

import numpy as np
import pytest

from controlplane.store.arrays import ZSTD_MAGIC, pack, unpack


@pytest.mark.parametrize("array", [np.arange(58 * 960, dtype=np.int64).reshape(58, 960) % 977,
                                   np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4),
                                   np.zeros((0, 5), np.int32)])
def test_an_array_comes_back_as_it_went_in(array):
    blob = pack(array)
    assert blob.startswith(ZSTD_MAGIC)
    back = unpack(blob)
    assert back.dtype == array.dtype and back.shape == array.shape and np.array_equal(back, array)


def test_blobs_written_by_earlier_versions_still_read():
    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    for blob in (buffer.getvalue(), zlib.compress(buffer.getvalue(), 1)):  # plain .npy, then zlib
        assert np.array_equal(unpack(blob), array)


def test_a_window_sized_blob_is_a_fraction_of_its_raw_bytes():
    load = np.random.default_rng(0).poisson(3000, size=(58, 960)).astype(np.int64)
    assert len(pack(load)) < load.nbytes / 4
