"""Leader election: every replica serves the API and ingests snapshots; one leader reconciles and writes."""
