"""Actuate: turn decisions into the state agents (and later Kubernetes or local processes) receive."""
