"""StepTimer's accounting on a scripted clock: nested parts exclude their children, parts add up to the step less
the untimed Python between them, and each thread keeps its own timer."""

from __future__ import annotations

import threading

import pytest

from vfl.training import step_timer
from vfl.training.step_timer import TIMER, StepTimer


class ScriptedClock:
    """perf_counter that returns the times it is told, in order."""

    def __init__(self, times):
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


@pytest.fixture
def clock(monkeypatch):
    def install(times):
        c = ScriptedClock(times)
        monkeypatch.setattr(step_timer.time, "perf_counter", c)
        return c

    return install


def test_nested_parts_exclude_their_children_and_the_residual_is_the_untimed_time(clock):
    # Prepare: a 10 s step: 'top' runs 1..7 with 'backward' inside it at 2..5, 'data' at 8..9
    c = clock([0.0, 1.0, 2.0, 5.0, 7.0, 8.0, 9.0, 10.0])
    t = StepTimer()
    # Execute
    with t.step():
        with t.part("top"):
            with t.part("backward"):
                pass
        with t.part("data"):
            pass
    r = t.report()
    # Assert: top is 6 s less its 3 s child; the parts sum to 7 s of the 10 s step; 3 s untimed
    assert c.times == []
    assert r["parts"] == {"data": 1.0, "top": 3.0, "backward": 3.0}
    assert list(r["parts"]) == ["data", "top", "backward"]  # PARTS order, not call order
    assert r["steps"] == 1 and r["step_seconds"] == 10.0 and r["parts_seconds"] == 7.0
    assert r["residual_seconds"] == 3.0 and r["residual_fraction"] == pytest.approx(0.3)


def test_parts_sum_over_steps_and_reset_clears_them(clock):
    # Prepare: two steps of 2 s, each fully covered by one 'top' part
    clock([0.0, 0.0, 2.0, 2.0, 10.0, 10.0, 12.0, 12.0])
    t = StepTimer()
    # Execute
    for _ in range(2):
        with t.step():
            with t.part("top"):
                pass
    r = t.report()
    t.reset()
    # Assert
    assert r["steps"] == 2 and r["step_seconds"] == 4.0 and r["parts"] == {"top": 4.0}
    assert r["residual_seconds"] == 0.0 and r["residual_fraction"] == 0.0
    assert t.report()["steps"] == 0 and t.report()["parts"] == {}


def test_a_part_that_raises_is_still_timed_and_the_stack_unwinds(clock):
    # Prepare
    clock([0.0, 3.0, 5.0, 6.0])
    t = StepTimer()
    # Execute
    with pytest.raises(RuntimeError):
        with t.part("top"):
            raise RuntimeError("boom")
    with t.part("data"):
        pass
    # Assert: 'top' has its 3 s and did not swallow the later 'data' part
    assert t.report()["parts"] == {"data": 1.0, "top": 3.0}


def test_sync_runs_before_each_part_ends(clock):
    # Prepare: the sync hook reads the clock (at 5 s), as a CUDA synchronize waits for the kernels; the part must
    # end after it (at 9 s), not before it (which would time 5 s)
    c = clock([0.0, 5.0, 9.0])
    t = StepTimer()
    t.sync = c
    # Execute
    with t.part("backward"):
        pass
    # Assert
    assert c.times == [] and t.report()["parts"] == {"backward": 9.0}


def test_each_thread_keeps_its_own_timer():
    # Prepare
    TIMER.reset()
    seen = {}

    def other():
        TIMER.reset()
        TIMER.add_step(2.0)
        seen["other"] = TIMER.report()["step_seconds"]

    # Execute
    TIMER.add_step(1.0)
    th = threading.Thread(target=other)
    th.start()
    th.join(timeout=10)
    # Assert
    assert not th.is_alive() and seen["other"] == 2.0
    assert TIMER.report()["step_seconds"] == 1.0 and TIMER.report()["steps"] == 1
    TIMER.reset()
