"""Collect: check a snapshot against what the controller knows, and turn it into window sums."""
