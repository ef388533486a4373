"""Re-implementations of published algorithms, behind the controller's interfaces, for benchmarks and tests only."""
