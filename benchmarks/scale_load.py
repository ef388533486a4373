"""The scale benchmark's load generator (benchmarks/scale.py): keep-alive connections posting a window's bodies,
all at once or each at the moment an agent's poster would send it (agents/protocol/grid.py `post_at`), timing
each round trip (from the moment it is sent) and the window's (from the window's end)."""

from __future__ import annotations

import http.client
import queue
import threading
import time
from dataclasses import dataclass, field

AGENT_TOKEN = "bench-agent"


@dataclass
class WindowResult:
    seconds: float  # the window's end (its posts handed over) to the last answer
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
            path, instance, body, send_at = job
            time.sleep(max(0.0, send_at - time.perf_counter()))
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

    def post_window(self, path: str, posts: list[tuple[int, bytes]], delays: list[float] | None = None) -> WindowResult:
        """delays: seconds after now at which each post is sent (None: all at once)."""
        started = time.perf_counter()
        for (instance, body), delay in zip(posts, delays or [0.0] * len(posts), strict=True):
            self.jobs.put((path, instance, body, started + delay))
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
