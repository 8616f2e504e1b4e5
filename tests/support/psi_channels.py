"""PSI test support: a leader channel and follower channels over real CurveZMQ on 127.0.0.1, and a thread runner."""

from __future__ import annotations

import threading

from tests.support.party_processes import free_port, party_keys


def _channels(tmp_path, followers=("follower0",), timeout=10.0, through=None, port=None):
    """A leader channel on a free port (or `port`) and a factory of follower channels, which connect directly or
    through the relay `through`."""
    from vfl.wire import FollowerChannel, LeaderChannel
    from vfl.wire.curve_keys import load_follower_keys, load_leader_keys

    keys = party_keys(str(tmp_path), ("leader", *followers))
    endpoint = f"tcp://127.0.0.1:{port or free_port()}"
    leader = LeaderChannel(
        endpoint,
        tuple(followers),
        load_leader_keys(keys["leader"][1], {f: keys[f][0] for f in followers}),
        timeout,
        "leader",
        max_message_bytes=1 << 22,
    )
    connect = through.endpoint if through is not None else endpoint

    def follower(name):
        return FollowerChannel(
            connect, name, load_follower_keys(keys[name][1], keys["leader"][0]), timeout, max_message_bytes=1 << 22
        )

    return leader, follower


def _in_thread(fn, *args):
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box
