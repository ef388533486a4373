"""Dynamo planner's `kalman` load predictor (core/load/predictors.py): a local linear trend.

State (level, trend) with F = [[1, 1], [0, 1]], process noise diag(q_level, q_trend), measurement noise r;
with fewer than `min_points` values it predicts the last value. Its defaults are the published ones.
"""

from __future__ import annotations

import math

import numpy as np


class Kalman:
    """Dynamo's KalmanPredictor: level + trend, predict the next interval's value."""

    def __init__(self, q_level: float = 1.0, q_trend: float = 0.1, r: float = 10.0, min_points: int = 5) -> None:
        self.x = np.zeros(2)
        self.p = np.eye(2) * 1000.0
        self.f = np.array([[1.0, 1.0], [0.0, 1.0]])
        self.q = np.diag([q_level, q_trend])
        self.r = r
        self.min_points = min_points
        self.values: list[float] = []

    def add(self, value: float) -> None:
        value = 0.0 if math.isnan(value) else value
        self.values.append(value)
        if len(self.values) == 1:
            self.x = np.array([value, 0.0])
            return
        self.x = self.f @ self.x  # predict
        self.p = self.f @ self.p @ self.f.T + self.q
        gain = self.p[:, 0] / (self.p[0, 0] + self.r)  # update with H = [1, 0]
        self.x = self.x + gain * (value - self.x[0])
        self.p = self.p - np.outer(gain, self.p[0])

    def predict(self) -> float:
        if len(self.values) < self.min_points:
            return self.values[-1] if self.values else 0.0
        return float((self.f @ self.x)[0])
