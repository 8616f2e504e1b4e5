"""Free TCP ports for local runs, chosen below the kernel's ephemeral range.

A port from bind(("127.0.0.1", 0)) lies in the ephemeral range, so a follower that connects before
the leader has bound it can be handed that very port as its own source port and connect to itself
(TCP simultaneous open); the leader's bind then fails with "address already in use". Ports below
the ephemeral range are never used as source ports, so that race cannot happen.
"""

from __future__ import annotations

import random
import socket


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1", tries: int = 200) -> int:
    """A port that is free now and outside the ephemeral range."""
    lo, _ = ephemeral_range()
    floor = 10_000 if lo > 12_000 else 1024
    rng = random.SystemRandom()
    for _ in range(tries):
        port = rng.randrange(floor, lo)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found in [{floor}, {lo})")


if __name__ == "__main__":
    print(free_port())
