import pytest

from agents.protocol.grid import post_at
from controlplane.store.window_reads import first_unread_index, next_pass_delay

WINDOW = 5.0


@pytest.mark.parametrize("index", [0, 7, 352_000_000])
def test_a_window_is_read_half_a_window_after_it_ends(index):
    end = (index + 1) * WINDOW
    assert first_unread_index(end + 0.49 * WINDOW, WINDOW) == index  # window `index` still filling
    assert first_unread_index(end + 0.51 * WINDOW, WINDOW) == index + 1


def test_every_poster_has_sent_a_window_before_it_is_read():
    index = 1_000
    end = (index + 1) * WINDOW
    last_post = post_at(end, WINDOW, 0.999999)
    assert first_unread_index(last_post, WINDOW) == index  # still unread when its last post goes out
    assert last_post < end + 0.5 * WINDOW - 0.2 * WINDOW  # and the posts have a fifth of a window to arrive


@pytest.mark.parametrize("interval", [5.0, 1.0, 12.5])
def test_passes_land_on_the_loop_grid_within_one_interval(interval):
    for now in [1_764_000_000.0 + k * 0.37 for k in range(60)]:
        delay = next_pass_delay(now, interval, WINDOW)
        assert 0 < delay <= interval
        intervals = (now + delay - 0.6 * WINDOW) / interval  # from a point 0.6 windows past a window's end
        assert intervals == pytest.approx(round(intervals), abs=1e-6)


def test_a_loop_passing_every_window_stays_clear_of_the_posts_at_window_ends():
    now = 1_764_000_001.234  # the first pass ran at start-up, off the grid
    passes = []
    for _ in range(20):
        now += 0.8  # the pass itself
        now += next_pass_delay(now, WINDOW, WINDOW)
        passes.append(now)
    into_window = [(t % WINDOW) / WINDOW for t in passes]
    assert all(x == pytest.approx(0.6, abs=1e-6) for x in into_window)  # the window before is readable, posts done
    gaps = [round(b - a, 6) for a, b in zip(passes[:-1], passes[1:], strict=True)]
    assert gaps == [WINDOW] * 19  # one pass a window, no more
    assert all(first_unread_index(t, WINDOW) == int(t // WINDOW) for t in passes)  # it reads the window just ended
