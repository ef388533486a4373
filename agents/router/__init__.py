"""`moectl router`: the OpenAI-compatible front of a deployment; routes each request to worker ranks."""
