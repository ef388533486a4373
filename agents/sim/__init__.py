"""A simulated fleet: EP ranks that route skewed, drifting load and talk to the controller over HTTP."""
