"""The bootstrap tokens the test controller is configured with, and headers that carry them."""

API_TOKEN, AGENT_TOKEN = "test-operator-token", "test-agent-token"


def operator() -> dict:
    return {"Authorization": f"Bearer {API_TOKEN}"}


def agent() -> dict:
    return {"Authorization": f"Bearer {AGENT_TOKEN}"}
