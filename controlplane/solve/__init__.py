"""Pure solvers: arrays and dataclasses in, dataclasses out (NumPy only, no I/O)."""
