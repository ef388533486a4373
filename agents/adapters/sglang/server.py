"""The SGLang server's HTTP surface the sidecar uses (endpoint paths in names.py). Thin: no decisions here."""

from __future__ import annotations

import httpx

from agents.adapters.sglang import names


class SGLangServer:
    def __init__(self, url: str, *, api_key: str = "", timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=url, timeout=timeout, headers=headers, transport=transport)

    def server_info(self) -> dict:
        answer = self.client.get(names.SERVER_INFO)
        answer.raise_for_status()
        return answer.json()

    def start_record(self) -> None:
        self.client.post(names.START_RECORD).raise_for_status()

    def dump_record(self) -> None:
        """Returns once SGLang answered: rank 0 has written the dump (the request waits on the scheduler)."""
        self.client.post(names.DUMP_RECORD).raise_for_status()

    def metrics(self) -> str:
        answer = self.client.get("/metrics")
        answer.raise_for_status()
        return answer.text

    def close(self) -> None:
        self.client.close()
