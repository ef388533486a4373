"""The agent against a real controller (uvicorn on a free port): it registers, posts a window per rank,
applies the placement the loop plans on every rank at the same step, and survives the controller
being away."""

from __future__ import annotations

import math
import random
import threading
import time

import httpx
import pytest
from support.auth import AGENT_TOKEN
from support.controllers import replica
from support.live import live_fleet
from support.ranks import EP_SIZE, ThreadGroup, make_group, run_group
from support.servers import free_port, until

from agents.protocol.grid import POST_SPREAD_WINDOWS, post_at
from agents.telemetry.poster import ControllerLink, SnapshotPoster
from controlplane.cmd.serve import Controller


@pytest.fixture
def controller(settings):
    ctl = Controller(settings.model_copy(update={"port": free_port(), "window_seconds": 1.0,
                                                 "reconcile_seconds": 0.5}))
    thread = ctl.start()
    yield ctl
    ctl.stop()
    thread.join(timeout=10)


@pytest.mark.slow
def test_agents_report_and_switch_placement_together(controller):
    engines, agents = make_group(controller.url)
    switched: list = []
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not switched:
            run_group(agents, engines, 2.0, switched)
        run_group(agents, engines, 2.5, [])  # whole windows under the new placement, for the overview
    finally:
        for agent in agents:
            agent.close()
    assert switched, "the controller never issued a placement the group applied"
    by_rank = {rank: (step, version) for rank, step, version in switched}
    assert by_rank[0] == by_rank[1], switched  # same step, same version on both ranks
    overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview").json()
    assert overview["agents"]["total"] == EP_SIZE
    for signal in ("imbalance", "all2all_share", "prefix_hit_ratio", "mtp_acceptance"):
        assert overview[signal] and overview[signal] > 0, (signal, overview)
    registry = agents[0].exporter
    assert registry.snapshots._value.get() >= 2


class HeldTransport(httpx.HTTPTransport):
    """The real transport, held until the test lets it go; it notes which threads send through it."""

    def __init__(self):
        super().__init__()
        self.is_entered, self.is_released, self.threads = threading.Event(), threading.Event(), set()
        self.num_let_go = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.threads.add(threading.get_ident())
        self.is_entered.set()
        self.is_released.wait(30)
        self.num_let_go += 1
        return super().handle_request(request)


def test_a_dead_controller_never_blocks_a_step_and_the_rank_keeps_its_state():
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens
    clock, transport = [5000.0], HeldTransport()
    link = ControllerLink(url, AGENT_TOKEN, max_queue=2, min_backoff=0.05, max_backoff=0.2, transport=transport)
    engines, agents = make_group(url, link=link, clock=lambda: clock[0])
    agent, engine = agents[0], engines[0]
    engine.group = ThreadGroup(1).rank(0)  # run rank 0 alone

    def step() -> None:
        _, stats = engine.step()
        agent.on_step(stats)
        agent.tick()
        clock[0] += 0.25  # a window closes every 4 steps

    agents[1].close()
    try:
        deadline = time.monotonic() + 10
        while not transport.is_entered.is_set() and time.monotonic() < deadline:
            step()
            time.sleep(0.01)
        assert transport.is_entered.is_set(), "no window was posted"
        # a post hangs (no answer, no refusal), and the rank steps on: 10 more windows, into a queue of 2
        for _ in range(40):
            step()
        assert transport.num_let_go == 0  # every step ran while the first post still hung
        transport.is_released.set()  # now the posts reach the port nobody listens on
        until("two refused posts", lambda: agent.exporter.failures["connect"]._value.get() >= 2, timeout=10,
              interval=0.05)
    finally:
        transport.is_released.set()
        agent.close()
    assert transport.threads == {agent.poster.thread.ident}  # the posts happen on the poster's thread
    assert agent.exporter.failures["queue_full"]._value.get() >= 1
    assert engine.placement.version == 0 and agent.exporter.snapshots._value.get() == 0


@pytest.mark.slow
def test_serving_survives_a_controller_restart_and_the_agents_reconnect(settings):
    settings = settings.model_copy(update={"port": free_port(), "window_seconds": 1.0, "reconcile_seconds": 0.5})
    first = Controller(settings)
    thread = first.start()
    engines, agents = make_group(first.url, link=ControllerLink(first.url, AGENT_TOKEN, min_backoff=0.1,
                                                                 max_backoff=0.5))
    try:
        run_group(agents, engines, 3.0, [], until=lambda: agents[0].poster.num_posted >= 1)
        posted = agents[0].poster.num_posted
        assert posted >= 1
        first.stop()
        thread.join(timeout=10)
        steps = engines[0].num_steps
        run_group(agents, engines, 3.0, [])  # nobody answers: the group keeps stepping
        assert engines[0].num_steps > steps + 20
        assert agents[0].exporter.failures["connect"]._value.get() >= 1
        second = Controller(settings)  # same database: it resumes from its store
        thread = second.start()
        run_group(agents, engines, 3.0, [], until=lambda: agents[0].poster.num_posted > posted)
        assert agents[0].poster.num_posted > posted
        overview = httpx.get(f"{second.url}/v1/deployments/tiny/overview").json()
        assert overview["agents"] == {"total": EP_SIZE, "fresh": EP_SIZE, "stale": 0, "gone": 0, "unhealthy": []}
        second.stop()
        thread.join(timeout=10)
    finally:
        for agent in agents:
            agent.close()


@pytest.mark.slow
# its assertion is a thread's wake-up (0.3 s): beside another suite at load average 10, a post left 0.46 s late
@pytest.mark.exclusive
def test_a_fleets_posts_of_a_window_are_spread_over_the_first_tenth_of_the_next(settings, tmp_path):
    """Eight ranks close a window at the same instant; their posters send it at random moments within
    POST_SPREAD_WINDOWS of the window's end (agents/protocol/grid.py), and every post is answered. The
    controller is a process of its own, as it is beside a fleet: in this one its loop held the posters' GIL
    (a post left 0.32 s after its moment, with the machine's other suite waiting)."""
    window_seconds = 1.0  # the replica's
    with replica("spread", {"MOECTL_DATABASE_URL": settings.database_url}, tmp_path) as controller:
        _posts_leave_at_their_moments(controller.url, window_seconds)


def _posts_leave_at_their_moments(url: str, window_seconds: float) -> None:
    [instance] = live_fleet(url, {"mode": "observe"}, num_windows=1, window_seconds=window_seconds)
    end = math.ceil(time.time() / window_seconds + 1) * window_seconds
    snapshots = instance.window(end - window_seconds, window_seconds)
    sent, answered, lock = {}, set(), threading.Lock()

    class SendClock(httpx.HTTPTransport):
        """The real transport; notes the moment each rank's post leaves (what the spread is about), apart from
        how long the controller takes to answer it, which a loaded machine stretches."""

        def __init__(self, rank: int):
            super().__init__()
            self.rank = rank

        def handle_request(self, request):
            with lock:
                sent.setdefault(self.rank, time.time())
            return super().handle_request(request)

    def on_answer(rank: int):
        def note(_answer) -> None:
            with lock:
                answered.add(rank)
        return note

    posters = [SnapshotPoster(ControllerLink(url, AGENT_TOKEN, transport=SendClock(rank)), on_answer=on_answer(rank),
                              on_failure=print, rng=random.Random(rank)) for rank in range(len(snapshots))]
    post_ats = [post_at(end, window_seconds, random.Random(rank).random()) for rank in range(len(snapshots))]
    for poster in posters:  # running before the window closes, as an agent's poster is
        poster.start()
    time.sleep(max(0.0, end - time.time()))  # the window closes on every rank at once
    for poster, snapshot in zip(posters, snapshots, strict=True):
        poster.submit(snapshot)
    until("every rank's post answered", lambda: len(answered) == len(snapshots), timeout=10, interval=0.05)
    for poster in posters:
        poster.stop()
    for rank, at in enumerate(post_ats):  # each leaves at the moment its draw put it (0.3 s: a thread's wake-up)
        assert at <= sent[rank] <= at + 0.3, (rank, at - end, sent[rank] - end)
    assert max(post_ats) - min(post_ats) > POST_SPREAD_WINDOWS * window_seconds / 2  # these draws spread
