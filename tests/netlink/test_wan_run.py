"""Training across a WAN: the parties as real processes over tcp, the follower connected through the shipped relay at
100 ms RTT with 20 ms jitter (PSI, handshake, every step, evaluation and the goodbye all cross it); the heartbeats
and deadlines keep a healthy peer, and the synchronous schedule gives the same model as without the link."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import yaml

from tests.support.party_processes import free_port, party_configs, party_keys
from vfl.netlink.relay import LinkSpec, Relay
from vfl.session.link_probe import LATENCY_WARN_SPS, LinkFigures, latency_note

FAR = LinkSpec(rtt_ms=100, jitter_ms=20, bandwidth_mbit=50)


@pytest.fixture(scope="module")
def shards_tiny(synth_tiny, tmp_path_factory):
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    out = tmp_path_factory.mktemp("wan") / "shards"
    prepare(str(synth_tiny), str(out), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    return out


def _run(procs, tmp, shards, relay_spec: LinkSpec | None) -> tuple[dict, Relay | None]:
    """One epoch (batches of 256 of ~2.4k rows, evaluation every 4 steps) with the follower connected directly or
    through a relay of relay_spec; the leader's metrics.json and the relay."""
    cfgs = party_configs(  # fresh keys: the far run's PSI crosses the link too (no reuse of the direct run's)
        str(tmp),
        str(shards),
        train={"epochs": 1, "batch_size": 256, "eval_every_steps": 4, "eval_batch_size": 256},
        fresh_keys=True,
    )
    port = int(yaml.safe_load(open(cfgs["leader"]).read())["network"]["bind"].rsplit(":", 1)[1])
    relay = Relay(("127.0.0.1", port), relay_spec, seed=2).start() if relay_spec else None
    try:
        procs.start("leader", "leader", cfgs["leader"])
        procs.start(
            "follower0", "follower", cfgs["follower0"], *([f"network.connect={relay.endpoint}"] if relay else [])
        )
        for name in ("leader", "follower0"):
            code, _, err = procs.wait(name, timeout=600)
            assert code == 0, f"{name} failed: {err}"
    finally:
        if relay:
            relay.close()
    return json.loads(open(os.path.join(tmp, "out", "metrics.json")).read()), relay


def test_a_run_through_a_100_ms_jittery_link_completes_with_the_same_model(tmp_path, shards_tiny, procs):
    """Every message of the run crosses the link (PSI, HELLO, each step's EMBEDDING and GRADIENT, the evaluations):
    it completes, and its test AUC and logloss are those of the same run on loopback (the schedule is synchronous,
    so the computation is the same)."""
    # Execute
    direct, _ = _run(procs, tmp_path / "direct", shards_tiny, None)
    procs.cleanup()
    procs.procs.clear()
    far, relay = _run(procs, tmp_path / "far", shards_tiny, FAR)
    # Assert
    assert far["test_auc"] == pytest.approx(direct["test_auc"], abs=1e-9)
    assert far["test_logloss"] == pytest.approx(direct["test_logloss"], abs=1e-9)
    assert far["psi"]["intersection"] == direct["psi"]["intersection"]
    rows = far["psi"]["intersection"]
    assert relay.connections >= 1 and relay.bytes_up > 4 * 2 * rows and relay.bytes_down > 4 * 2 * rows // 2
    # the leader timed the link at HELLO (at least 100 ms less the jitter both ways) and warned that it bounds training
    log = open(os.path.join(tmp_path, "far", "out", "leader.log")).read()
    rtt_ms = float(re.search(r"link to follower0: RTT ([0-9.]+) ms \(timed at its HELLO\)", log).group(1))
    assert 100 - 2 * 20 <= rtt_ms < 100 + 2000, rtt_ms
    assert re.search(r"warning: link to follower0: this run is latency bound: .* at most [0-9,]+ samples/s", log)
    # on loopback the warning follows the round trip that run timed (a loaded machine's loopback can take > 2.6 ms,
    # which bounds batches of 256 below LATENCY_WARN_SPS)
    direct_log = open(os.path.join(tmp_path, "direct", "out", "leader.log")).read()
    direct_rtt_ms = float(re.search(r"link to follower0: RTT ([0-9.]+) ms \(timed at its HELLO\)", direct_log).group(1))
    assert direct_rtt_ms < rtt_ms / 10, (direct_rtt_ms, rtt_ms)
    expected = latency_note(LinkFigures(direct_rtt_ms / 1000), 256, 0) is not None
    if abs(direct_rtt_ms - 256e3 / LATENCY_WARN_SPS) > 0.01:  # the log rounds the RTT to 0.01 ms
        assert ("this run is latency bound" in direct_log) == expected, direct_rtt_ms


def test_check_link_measures_the_link_prints_what_it_calls_for_and_both_parties_exit_0(tmp_path, shards_tiny, procs):
    """`--check-link` on both parties, after PSI: the round trip and each direction's bandwidth through a 40 ms,
    40 Mbit/s link, what it calls for, and a clean stop of both parties with nothing trained."""
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_tiny))
    port = int(yaml.safe_load(open(cfgs["leader"]).read())["network"]["bind"].rsplit(":", 1)[1])
    with Relay(("127.0.0.1", port), LinkSpec(rtt_ms=40, bandwidth_mbit=40), seed=5) as relay:
        # Execute
        procs.start("leader", "leader", cfgs["leader"], "--check-link")
        procs.start("follower0", "follower", cfgs["follower0"], "--check-link", f"network.connect={relay.endpoint}")
        results = {name: procs.wait(name, timeout=300) for name in ("leader", "follower0")}
    # Assert: both exit 0; the leader's figures are bounded by the link's; no model, no metrics
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name} failed: {err}"
    log = open(os.path.join(tmp_path, "out", "leader.log")).read()
    got = re.search(r"RTT ([0-9.]+) ms, leader->follower ([0-9.,]+) Mbit/s, follower->leader ([0-9.,]+) Mbit/s", log)
    assert got, log[-2000:]
    rtt, down, up = (float(g.replace(",", "")) for g in got.groups())
    assert 40 <= rtt < 40 + 2000 and all(40 / 4 <= x <= 40 * 1.1 for x in (down, up)), got.group(0)
    assert "the link calls for: train.staleness=" in log and "nothing was trained" in log
    assert "the leader measured the link" in open(os.path.join(tmp_path, "out", "follower0.log")).read()
    assert not os.path.exists(os.path.join(tmp_path, "out", "metrics.json"))


def _idle_exchange(tmp_path, idle_s: float) -> tuple[list, Relay]:
    """A channel pair through the far link: one message each way, idle_s of silence, one more each way (as long as
    the connection holds); the messages received and the relay."""
    from vfl.wire import FollowerChannel, LeaderChannel, WireError
    from vfl.wire.curve_keys import load_follower_keys, load_leader_keys
    from vfl.wire.endpoint import HEARTBEAT_TIMEOUT_MS

    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    port = free_port()
    timeout_s = HEARTBEAT_TIMEOUT_MS / 1000 + 20
    leader = LeaderChannel(
        f"tcp://127.0.0.1:{port}",
        ("follower0",),
        load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
        timeout_s,
        "leader",
    )
    got = []
    with Relay(("127.0.0.1", port), FAR, seed=4) as relay:
        follower = FollowerChannel(
            relay.endpoint, "follower0", load_follower_keys(keys["follower0"][1], keys["leader"][0]), 5.0
        )
        try:
            follower.send("WAIT", {})
            got.append(leader.recv("follower0", "WAIT"))
            time.sleep(idle_s)
            leader.send("follower0", "WAIT", {})
            got.append(follower.recv(("WAIT",)))
            follower.send("WAIT", {})
            got.append(leader.recv("follower0", "WAIT"))
        except WireError:
            pass
        finally:
            follower.close()
            leader.close()
    return got, relay


@pytest.mark.slow  # waits out the 20 s heartbeat timeout; the 100 ms jittery run above covers the link by default
def test_an_idle_connection_through_the_far_link_outlives_the_heartbeat_timeout(tmp_path):
    """ZMTP heartbeats (a PING every HEARTBEAT_IVL_MS, a peer silent for HEARTBEAT_TIMEOUT_MS is lost) keep a healthy
    peer across 100 ms +- 20 ms: after more than the timeout without a message, both ends still talk, on the same
    connection."""
    # Prepare
    from vfl.wire.endpoint import HEARTBEAT_IVL_MS, HEARTBEAT_TIMEOUT_MS

    # Execute: nothing sent for longer than the heartbeat timeout
    got, relay = _idle_exchange(tmp_path, HEARTBEAT_TIMEOUT_MS / 1000 + 2 * HEARTBEAT_IVL_MS / 1000)
    # Assert
    assert [m.seq for m in got] == [0, 0, 1]
    assert relay.connections == 1


def test_power_a_heartbeat_timeout_below_the_round_trip_loses_the_idle_peer(tmp_path, monkeypatch):
    """Power: with a PING every 0.2 s and a timeout of 60 ms (below the link's 100 ms RTT) the same silence ends
    the connection (the follower reconnects, or the leader reports it lost)."""
    # Prepare
    from vfl.wire import endpoint

    monkeypatch.setattr(endpoint, "HEARTBEAT_IVL_MS", 200)
    monkeypatch.setattr(endpoint, "HEARTBEAT_TIMEOUT_MS", 60)
    # Execute
    got, relay = _idle_exchange(tmp_path, 2.0)
    # Assert
    assert len(got) < 3 or relay.connections > 1, (len(got), relay.connections)
