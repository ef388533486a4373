"""Dynamo's profile interpolation (`perf_interpolation.py`): what its SLA planner reads capacity from.

Prefill: cubic in prompt length (clamped to the profiled range) for TTFT and prompt tokens/s/GPU.
Decode: a cubic griddata over (KV usage, context length) on a RESOLUTION x RESOLUTION grid, NaN filled
by nearest, for ITL and output tokens/s/GPU; the best throughput within an ITL is scanned from high
usage down. Seconds, tokens.
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import griddata, interp1d

from benchmarks.pdsim.profile import Profile

RESOLUTION = 100


class Interpolators:
    def __init__(self, profile: Profile) -> None:
        self.min_isl, self.max_isl = profile.prefill_isl.min(), profile.prefill_isl.max()
        self.ttft = interp1d(profile.prefill_isl, profile.prefill_ttft, kind="cubic")
        self.thpt = interp1d(profile.prefill_isl, profile.prefill_thpt_per_gpu, kind="cubic")
        self.max_kv_tokens = profile.max_kv_tokens
        self.xi = np.linspace(0, 1, RESOLUTION)
        self.yi = np.linspace(0, profile.y_context_length.max(), RESOLUTION)
        grid = np.meshgrid(self.xi, self.yi)
        points = (profile.x_kv_usage, profile.y_context_length)

        def surface(values: np.ndarray) -> np.ndarray:
            cubic = griddata(points, values, tuple(grid), method="cubic")
            nearest = griddata(points, values, tuple(grid), method="nearest")
            return np.where(np.isnan(cubic), nearest, cubic)

        self.itl_grid, self.thpt_grid = surface(profile.z_itl), surface(profile.z_thpt_per_gpu)

    def prefill_ttft(self, isl: float) -> float:
        return float(self.ttft(min(max(isl, self.min_isl), self.max_isl)))

    def prefill_thpt_per_gpu(self, isl: float) -> float:
        return float(self.thpt(min(max(isl, self.min_isl), self.max_isl)))

    def _index(self, values: np.ndarray, value: float) -> int:
        return int(np.clip(np.round((value - values[0]) / (values[1] - values[0])), 0, RESOLUTION - 1))

    def decode_itl(self, concurrency: float, context: float) -> float:
        usage = concurrency * context / self.max_kv_tokens
        return float(self.itl_grid[self._index(self.yi, context), self._index(self.xi, usage)])

    def best_decode_thpt_per_gpu(self, itl: float, context: float) -> float:
        """The highest throughput/GPU whose ITL is within `itl` at this context (scanned from high usage down)."""
        row = self._index(self.yi, context)
        for column in range(RESOLUTION - 1, -1, -1):
            if self.itl_grid[row, column] <= itl:
                return float(self.thpt_grid[row, column])
        return float(self.thpt_grid[row, 0])
