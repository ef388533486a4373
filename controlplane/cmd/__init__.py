"""Entry points: each `moectl` command, and the controller process (`serve`, `up`) that runs the stages."""
