"""The scale benchmark's load generator (benchmarks/scale.py): keep-alive connections posting a window's bodies
at once, timing each round trip and the window's."""

from __future__ import annotations

import http.client
import queue
import threading
import time
from dataclasses import dataclass, field

AGENT_TOKEN = "bench-agent"


@dataclass
class WindowResult:
    seconds: float  # first post sent to last answer
    latencies: list[float]
    statuses: dict[int, int] = field(default_factory=dict)
    answers: dict[int, bytes] = field(default_factory=dict)  # instance -> its first 200 answer


class Poster:
    """`connections` threads, each with a keep-alive connection, posting what `post_window` hands them."""

    def __init__(self, port: int, connections: int):
        self.port, self.jobs = port, queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(connections)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/json"}
        while True:
            job = self.jobs.get()
            if job is None:
                return
            path, instance, body = job
            started, answer, status = time.perf_counter(), b"", 0
            for _ in range(2):  # uvicorn closes a connection idle for 5 s: the second try opens a new one
                try:
                    conn.request("POST", path, body=body, headers=headers)
                    response = conn.getresponse()
                    answer, status = response.read(), response.status
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.results.put((started, time.perf_counter(), status, instance, answer))

    def post_window(self, path: str, posts: list[tuple[int, bytes]]) -> WindowResult:
        started = time.perf_counter()
        for instance, body in posts:
            self.jobs.put((path, instance, body))
        done = [self.results.get() for _ in posts]
        result = WindowResult(max(d[1] for d in done) - started, [end - begin for begin, end, *_ in done])
        for _, _, status, instance, answer in done:
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.answers.setdefault(instance, answer)
        return result

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)
