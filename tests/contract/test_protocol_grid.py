"""The window grid: the agent's windows, the controller's rows and the simulator's posts line up."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.protocol.grid import window_index, window_start

INDICES = st.integers(0, 2**40)
SECONDS = st.sampled_from([0.1, 0.3, 0.7, 1.0, 2.5, 5.0, 10.0, 60.0]) | st.floats(0.01, 3600.0)


@settings(deadline=None)  # arithmetic, not speed: a busy worker's pause is no failure
@given(INDICES, SECONDS)
def test_a_windows_start_maps_back_to_its_index(index, seconds):
    assert window_index(window_start(index, seconds), seconds) == index


@settings(deadline=None)
@given(INDICES, SECONDS, st.floats(0.0, 1.0, exclude_max=True))
def test_a_time_inside_a_window_maps_to_it(index, seconds, fraction):
    time = window_start(index, seconds) + fraction * seconds
    if time < window_start(index + 1, seconds):  # rounding may carry the sum onto the next start
        assert window_index(time, seconds) == index


def test_shorter_windows_land_in_the_grid_window_holding_their_start():
    """An agent still on 5 s windows, before it hears the controller's 10 s: both halves, one row."""
    assert [window_index(window_start(i, 5.0), 10.0) for i in range(4)] == [0, 0, 1, 1]
    assert window_index(1_800_000_009.999, 10.0) == 180_000_000
    assert window_index(1_800_000_010.0, 10.0) == 180_000_001
