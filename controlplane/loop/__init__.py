"""The loop: each pass observes every pool, verifies what it changed, plans, actuates, records findings, prunes."""
