"""Pure learners: forecasts fitted from stored windows (NumPy, scikit-learn; no I/O, no clock)."""
