"""The relay's faults: every connection dropped (now, after N bytes, at seeded random moments), an outage, a stall.

Tests and benches show a run surviving them (vfl/netlink/relay.py).

A drop resets every relayed connection (an RST to both ends, as a NAT or a firewall that forgets a connection sends)
and may refuse new connections for `down_s` seconds (the outage: clients retry, as ZeroMQ does by itself). A drop
after N bytes cuts the chunk that crosses the N-th byte there, so the connection ends in the middle of a message. A
stall delivers nothing either way for its duration, with the connections open (a peer that stops hearing, as a
SIGSTOPped process's peer does). `dropped` is an event set at every drop, for a test to wait on.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RandomFaults:
    """Seeded random faults: `count` drops at byte counts drawn uniformly in [lo_bytes, hi_bytes] of the upstream
    direction (client to target), each followed by an outage drawn in [0, max_down_s]."""

    count: int
    lo_bytes: int
    hi_bytes: int
    max_down_s: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 0):
            raise ValueError(f"count must be an integer >= 0, got count={self.count!r}")
        if not 0 <= self.lo_bytes <= self.hi_bytes:
            raise ValueError(f"need 0 <= lo_bytes <= hi_bytes, got lo_bytes={self.lo_bytes}, hi_bytes={self.hi_bytes}")
        if not 0 <= self.max_down_s < float("inf"):
            raise ValueError(f"max_down_s must be a finite number >= 0, got max_down_s={self.max_down_s!r}")

    def plan(self) -> list[tuple[int, float]]:
        """(upstream byte count, outage seconds) of each drop, in order."""
        rng = random.Random(self.seed)
        at = sorted(rng.randint(self.lo_bytes, self.hi_bytes) for _ in range(self.count))
        return [(n, rng.uniform(0, self.max_down_s)) for n in at]


class Faults:
    """The faults of one relay: what is due, and what happened (drops, the dropped event)."""

    def __init__(self, relay):
        self.relay = relay
        self.drops = 0
        self.dropped = threading.Event()
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._stall_until = 0.0
        self._due: list[tuple[bool, int, float]] = []  # (upstream?, byte count, outage seconds), soonest first
        self._pending_down = 0.0

    # -- scheduling ------------------------------------------------------------------------------
    def drop_all(self, down_s: float = 0.0) -> None:
        _check_seconds("down_s", down_s)
        with self._lock:
            self._down_until = max(self._down_until, time.monotonic() + down_s)
            self.drops += 1
        self.relay._reset_all()
        self.dropped.set()

    def drop_after(self, up_bytes: int | None, down_bytes: int | None, down_s: float = 0.0) -> None:
        if (up_bytes is None) == (down_bytes is None):
            raise ValueError("drop_after needs exactly one of up_bytes and down_bytes")
        n = up_bytes if up_bytes is not None else down_bytes
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"a byte count must be an integer >= 0, got {n!r}")
        _check_seconds("down_s", down_s)
        with self._lock:
            self._due.append((up_bytes is not None, n, down_s))
            self._due.sort(key=lambda d: d[1])

    def random(self, faults: RandomFaults) -> list[tuple[int, float]]:
        """Schedule `faults` (upstream byte counts); returns the plan."""
        plan = faults.plan()
        for n, down_s in plan:
            self.drop_after(n, None, down_s)
        return plan

    def stall(self, seconds: float) -> None:
        _check_seconds("seconds", seconds)
        with self._lock:
            self._stall_until = max(self._stall_until, time.monotonic() + seconds)

    # -- asked by the relay's threads ---------------------------------------------------------------
    def refusing(self) -> bool:
        return time.monotonic() < self._down_until

    def hold(self) -> None:
        """Block while a stall lasts."""
        while (wait := self._stall_until - time.monotonic()) > 0:
            time.sleep(min(wait, 0.1))

    def cut_within(self, n: int, up: bool) -> int | None:
        """A chunk of n bytes is about to cross (`up`: client to target): how many of its bytes go before a drop due
        inside it (None: no drop due)."""
        with self._lock:
            total = self.relay.bytes_up if up else self.relay.bytes_down
            for i, (d_up, at, down_s) in enumerate(self._due):
                if d_up == up and at < total + n:
                    del self._due[i]
                    self._pending_down = down_s
                    return max(0, at - total)
        return None

    def fire(self) -> None:
        """The drop that cut_within announced: every connection reset, the outage begun."""
        with self._lock:
            down_s, self._pending_down = self._pending_down, 0.0
        self.drop_all(down_s)


def _check_seconds(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {name}={value!r}")
