"""moectl agents: the bundled MoE runtime and the per-rank agent that observes and steers it."""
