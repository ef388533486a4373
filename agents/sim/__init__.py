"""Simulation without a model: one load model and one step-cost model.

They are used by the simulated engine (one EP rank under the real agent, `moectl worker --sim`) and by the
simulated fleet (EP groups that post snapshots to a controller over HTTP, `moectl sim` and `moectl up --sim`)."""
