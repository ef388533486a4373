"""Pool sizes, pure: replicas per pool (prefill, decode) and the local-prefill threshold (`planner.plan_pools`)."""
