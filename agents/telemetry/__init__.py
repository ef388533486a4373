"""The agent embedded in each EP rank: step stats -> windows, Prometheus metrics and a snapshot per window
to the controller; the desired state it answers -> staged on the engine."""
