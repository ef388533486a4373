"""Measured comparisons (run as `python -m benchmarks.<name>`); baselines/ holds the algorithms we compare against."""
