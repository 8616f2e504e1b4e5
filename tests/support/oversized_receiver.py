"""A channel end in its own process that awaits one message and reports its peak memory (tests/wire/test_wire_inflight.py).

`python -m tests.support.oversized_receiver leader|follower PORT LIMIT OWN_PUBLIC OWN_SECRET PEER_PUBLIC` prints
`READY <ru_maxrss KiB>` once its channel is up (the leader: once f0's HELLO came; the follower: once its HELLO is
sent), then awaits one message and
prints `DONE <ru_maxrss KiB> <the error in one line, or 'accepted'>`.
"""

from __future__ import annotations

import resource
import sys

from vfl.wire.curve_keys import FollowerKeys, LeaderKeys
from vfl.wire.follower_channel import FollowerChannel
from vfl.wire.frames import WireError
from vfl.wire.leader_channel import LeaderChannel


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str]) -> int:
    role, port, limit, public, secret, peer = argv
    address = f"tcp://127.0.0.1:{port}"
    if role == "leader":
        keys = LeaderKeys(public.encode(), secret.encode(), {peer.encode(): "f0"})
        channel = LeaderChannel(address, ("f0",), keys, 60.0, "leader", "run", max_message_bytes=int(limit))
        channel.recv("f0", "HELLO")  # the peer's first message names its connection
        receive = lambda: channel.recv("f0", "EMBEDDING")  # noqa: E731
    else:
        keys = FollowerKeys(public.encode(), secret.encode(), peer.encode())
        channel = FollowerChannel(address, "f0", keys, 60.0, max_message_bytes=int(limit))
        channel.send("HELLO", {})
        receive = lambda: channel.recv(("WELCOME",))  # noqa: E731
    print(f"READY {_peak_kib()}", flush=True)
    try:
        receive()
        outcome = "accepted"
    except WireError as e:
        outcome = " ".join(str(e).split())
    print(f"DONE {_peak_kib()} {outcome}", flush=True)
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
