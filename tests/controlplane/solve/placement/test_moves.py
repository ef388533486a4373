import numpy as np

from controlplane.solve.placement.moves import _lightest


def test_lightest_gpus_match_a_stable_sort_with_ties():
    rng = np.random.default_rng(0)
    for gpu_load in (rng.integers(0, 4, (50, 24)).astype(float), rng.random((50, 24)), np.zeros((3, 5))):
        for num in (1, 2, 4, gpu_load.shape[1]):
            expected = np.argsort(gpu_load, axis=1, kind="stable")[:, :num]
            np.testing.assert_array_equal(_lightest(gpu_load, num), expected)
