"""Serving test support: a stand-in scorer, a log that keeps warnings, and a bounded wait on the endpoint's counts."""

from __future__ import annotations

import time
from concurrent.futures import Future

from vfl.inference.serve.leader import Scored


class _Scorer:
    """Scores every id 0.5, at once or, while `hold` is an unset Event, once it is set."""

    followers, down, failed, batches, rows = ["f"], {}, None, 0, 0
    hold, waiting = None, 0

    def submit(self, ids, deadline_s):
        future = Future()
        if self.hold is not None:
            self.waiting += 1
            self.hold.wait(timeout=10)
        future.set_result(Scored([0.5] * len(ids), {}))
        return future


class _Lines:
    def __init__(self):
        self.lines = []

    def warning(self, line):
        self.lines.append(line)


def until(condition, timeout_s: float = 10.0) -> bool:
    """Whether `condition()` holds within `timeout_s` (looked at every 10 ms): for the endpoint's counts, which no event
    announces."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
