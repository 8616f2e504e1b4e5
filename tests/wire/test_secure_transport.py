"""Live attacks on a split run over real processes on 127.0.0.1: each is refused, and strangers never affect a run.

Attackers: a stranger (can reach the port, holds at most the leader's public key), a follower
using its own key under another party's name, a forged leader, a recorder replaying a session, and an
admitted follower sending garbage (it ends the run with one line, never a traceback).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import yaml
import zmq

from tests.support.party_processes import free_port, party_configs, party_keys
from tests.support.tcp_tools import (
    Forwarder,
    PeakRSS,
    command_header,
    curve_greeting,
    null_greeting,
    replay_server,
    replay_to,
    rss_bytes,
)
from vfl.wire.frames import MAGIC, WIRE_FRAME_BYTES, encode


def _edit(path: str, fn) -> None:
    doc = yaml.safe_load(open(path))
    fn(doc)
    yaml.safe_dump(doc, open(path, "w"))


def _connect_to(port: int):
    return lambda d: d["network"].update({"connect": f"tcp://127.0.0.1:{port}"})


def _leader_port(cfg: str) -> int:
    return int(yaml.safe_load(open(cfg))["network"]["bind"].rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory, shards_small):
    """A whole run whose follower talks to the leader through a recording TCP forwarder."""
    from tests.support.party_processes import Procs

    tmp = tmp_path_factory.mktemp("recorded")
    cfgs = party_configs(str(tmp), str(shards_small), timeout_s=30, fresh_keys=True)  # the capture holds a full PSI
    proxy = Forwarder(free_port(), _leader_port(cfgs["leader"]))
    _edit(cfgs["follower0"], _connect_to(proxy._server.getsockname()[1]))
    procs = Procs()
    try:
        procs.start("leader", "leader", cfgs["leader"])
        procs.start("follower0", "follower", cfgs["follower0"])
        codes = {name: procs.wait(name, 180) for name in ("leader", "follower0")}
    finally:
        procs.cleanup()
        proxy.close()
    yield {"tmp": tmp, "cfgs": cfgs, "proxy": proxy, "codes": codes}


def _session(proxy: Forwarder) -> int:
    """The connection of the recorded run that carried the training (the longest one)."""
    sizes = {n: len(proxy.stream("down", n)) for n in range(proxy.connections)}
    return max(sizes, key=sizes.get)


def test_loopback_capture_of_a_whole_run_holds_no_plaintext(recorded_run):
    # Prepare
    proxy = recorded_run["proxy"]
    # Execute
    up, down = proxy.stream("up"), proxy.stream("down")
    # Assert: the run went through the proxy and finished, yet no header or magic is readable
    # (HELLO / WELCOME also name CurveZMQ's own handshake commands, so the header fields stand in for them)
    for name, (code, _, err) in recorded_run["codes"].items():
        assert code == 0, f"{name}: {err}"
    assert len(up) > 50_000 and len(down) > 50_000
    # Each needle is 5 bytes or more. The streams are ~0.9 MB each way, where a 4-byte needle (the bare b"VFLW", as
    # before) turns up by chance with probability ~2 x 0.9e6 / 2^32 = 4e-4 a run (it did once, with no header, type
    # or field name beside it); a 5-byte one ~2e-6, every needle together below 1e-5
    for needle in (
        b'"type"',
        b"FORWARD",
        b"EMBEDDING",
        b"GRADIENT",
        MAGIC,  # b"VFLW" and the protocol version: the first frame of every message
        b"follower0",
        b'"run"',
        b'"nonce"',
        b"id_digest",
        b'"tensors"',
    ):
        assert needle not in up and needle not in down, needle


def test_recorded_leader_session_replayed_to_a_fresh_follower_is_refused_in_the_curve_handshake(recorded_run, procs):
    # Prepare: a server that plays back what the real leader sent
    proxy, cfgs = recorded_run["proxy"], recorded_run["cfgs"]
    port = free_port()
    replay_server(port, proxy.stream("down", _session(proxy)))
    _edit(cfgs["follower0"], _connect_to(port))
    # Execute
    t0 = time.monotonic()
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("follower0", 60)
    # Assert: refused in the CURVE handshake with its own message, at once: the replaying server holds the
    # connection open for 30 s, as long as the follower's deadline, so neither a hang nor a timeout can pass here
    assert code == 1 and "failed the CURVE handshake" in err
    assert time.monotonic() - t0 < 20


def test_recorded_follower_session_replayed_to_a_fresh_leader_delivers_nothing(recorded_run, procs):
    # Prepare: a fresh leader with the same keys; the recorder replays what the real follower sent
    proxy, cfgs = recorded_run["proxy"], recorded_run["cfgs"]
    _edit(cfgs["leader"], lambda d: d["network"].update({"timeout_s": 4}))
    out = recorded_run["tmp"] / "fresh_leader"
    procs.start("leader", "leader", cfgs["leader"], "--out", str(out))
    procs.wait_for_line("leader", str(out / "leader.log"), "listening on")
    # Execute
    closed_after = replay_to(_leader_port(cfgs["leader"]), proxy.stream("up", _session(proxy)))
    code, _, err = procs.wait("leader", 60)
    # Assert: the leader dropped the replay at once and never received the replayed first message (PSI hello)
    assert closed_after is not None and closed_after < 3
    assert code == 1 and "timed out after 4 s awaiting PSI hello from follower follower0" in err


def _storm(port: int, stop: threading.Event, counts: dict) -> None:
    """A stranger's connects and closes, with and without garbage bytes."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if counts["n"] % 3 == 1:
                    s.sendall(b"\x00garbage\xff" * 50)
                elif counts["n"] % 3 == 2:
                    s.sendall(null_greeting())
            counts["n"] += 1
        except OSError:
            counts["errors"] += 1
        time.sleep(0.005)


STRANGER_ROUNDS_BEFORE = 10  # connects (or stray-frame rounds) the stranger makes before the follower joins


def _stray_frames(port: int, stop: threading.Event, counts: dict, leader_public: bytes) -> None:
    """A stranger's ZeroMQ frames: unauthenticated (NULL) and under a fresh CURVE key that knows the leader's."""
    ctx = zmq.Context()
    frames = [bytes(memoryview(f)) for f in encode("ABORT", "follower0", "", 0, {"reason": "stray"})]
    try:
        while not stop.is_set():
            for curve in (False, True):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                # a refused handshake leaves the DEALER without a pipe, where a send waits for ever: the stranger
                # gives up after 0.2 s and goes on (it once stalled for a whole run, so it was not seen at work)
                s.setsockopt(zmq.SNDTIMEO, 200)
                if curve:
                    pub, sec = zmq.curve_keypair()
                    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = leader_public, pub, sec
                s.connect(f"tcp://127.0.0.1:{port}")
                try:
                    s.send_multipart(frames)
                    s.send_multipart([b"not", b"a", b"vfl", b"frame"])
                except zmq.Again:
                    pass
                time.sleep(0.05)
                s.close()
                counts["n"] += 1
    finally:
        ctx.term()


# each attack over a real run; the default suite runs the storm (the stray frames: `-m slow`)
@pytest.mark.parametrize("attack", ["connect_close_storm", pytest.param("stray_frames", marks=pytest.mark.slow)])
def test_strangers_during_a_run_never_affect_it(attack, tmp_path, shards_small, procs):
    # Prepare
    from vfl.wire.curve_keys import load_public_key

    # 3 epochs: a whole epoch still runs after the line the test waits for, so on a loaded machine the stranger is
    # seen at work after it (with 2 epochs the run once ended before the poll saw the line)
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=30, train={"epochs": 3, "log_every": 1})
    port = _leader_port(cfgs["leader"])
    leader_public = load_public_key(str(tmp_path / "keys" / "leader.key"))
    procs.start("leader", "leader", cfgs["leader"])
    procs.wait_for_line("leader", str(tmp_path / "out" / "leader.log"), "listening on")
    stop, counts = threading.Event(), {"n": 0, "errors": 0}
    args = (port, stop, counts) if attack == "connect_close_storm" else (port, stop, counts, leader_public)
    t = threading.Thread(target=_storm if attack == "connect_close_storm" else _stray_frames, args=args, daemon=True)
    # Execute: the stranger is at work from before the follower joins until the run ends
    t.start()
    try:
        # the stranger is seen at work before the follower starts (a count, not a race with the run's speed)
        deadline = time.monotonic() + 60
        while counts["n"] < STRANGER_ROUNDS_BEFORE and time.monotonic() < deadline:
            time.sleep(0.05)
        before = counts["n"]
        procs.start("follower0", "follower", cfgs["follower0"])
        procs.wait_for_line("leader", str(tmp_path / "out" / "leader.log"), "epoch 1 step 2/")
        during = counts["n"]
        results = {name: procs.wait(name, 180) for name in ("leader", "follower0")}
    finally:
        stop.set()
        t.join(10)
    # Assert
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err}"
    assert before >= STRANGER_ROUNDS_BEFORE and during > before and counts["n"] > during, (before, during, counts)


KEYLESS_ATTACKERS = 8  # each claims a 1 GiB CURVE handshake command and sends 48 MiB of it
PENDING_ATTACKERS = 96  # each sends all but the last byte of a frame under the cap, and holds on


def _keyless_attacker(port: int, claim: int, send: int, hold: threading.Event) -> None:
    """A stranger with no key: a CURVE greeting, then a command frame claiming `claim` bytes, `send` of them sent."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(curve_greeting() + command_header(claim))
            chunk = b"\x00" * (1 << 20)
            for at in range(0, send, len(chunk)):
                s.sendall(chunk[: min(len(chunk), send - at)])
            hold.wait(6.0)  # past the leader's 5 s handshake deadline
    except OSError:
        pass  # the leader hung up: exactly what should happen


def test_keyless_strangers_claiming_huge_handshake_frames_leave_leader_memory_flat(tmp_path, shards_small, procs):
    # Prepare: a leader waiting for its follower (default eval_batch_size: messages up to 1 GiB are allowed)
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=60)
    port = _leader_port(cfgs["leader"])
    p = procs.start("leader", "leader", cfgs["leader"])
    procs.wait_for_line("leader", str(tmp_path / "out" / "leader.log"), "listening on")
    time.sleep(1.0)
    before = rss_bytes(p.pid)
    sampler = PeakRSS(p.pid)
    hold = threading.Event()
    # Execute: 8 keyless strangers in parallel claim 1 GiB each; then 96 hold a frame just under the cap each
    huge = [
        threading.Thread(target=_keyless_attacker, args=(port, 1 << 30, 48 << 20, hold))
        for _ in range(KEYLESS_ATTACKERS)
    ]
    capped = [
        threading.Thread(target=_keyless_attacker, args=(port, WIRE_FRAME_BYTES, WIRE_FRAME_BYTES - 1, hold))
        for _ in range(PENDING_ATTACKERS)
    ]
    for t in huge + capped:
        t.start()
    time.sleep(3.0)
    hold.set()
    for t in huge + capped:
        t.join(timeout=30)
    peak = sampler.stop()
    procs.start("follower0", "follower", cfgs["follower0"])
    codes = {name: procs.wait(name, 120) for name in ("leader", "follower0")}
    print(f"keyless attack: leader RSS {before >> 20} MiB before, peak {peak >> 20} MiB (+{(peak - before) >> 20} MiB)")
    # Assert: the peak during the attack (not after it) stays within 64 MiB, and the run then trains as usual
    assert peak - before < 64 << 20, f"leader RSS peaked {(peak - before) >> 20} MiB above its {before >> 20} MiB"
    for name, (code, _, err) in codes.items():
        assert code == 0, f"{name}: {err}"


def test_an_impostor_under_another_partys_name_is_refused_and_the_honest_run_finishes(tmp_path, shards_three, procs):
    # Prepare: follower0's operator starts a process named follower1 before anyone else, with follower0's key
    cfgs = party_configs(str(tmp_path), str(shards_three), followers=("follower0", "follower1"), timeout_s=30)
    f0_secret = yaml.safe_load(open(cfgs["follower0"]))["network"]["secret_key_file"]
    impostor_cfg = str(tmp_path / "impostor.yaml")
    doc = yaml.safe_load(open(cfgs["follower1"]))
    doc["network"]["secret_key_file"] = f0_secret
    doc["output"]["dir"] = str(tmp_path / "impostor_out")
    yaml.safe_dump(doc, open(impostor_cfg, "w"))
    leader_log = str(tmp_path / "out" / "leader.log")
    # Execute: the impostor first; once the leader has refused it, the honest followers
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("impostor", "follower", impostor_cfg)
    icode, _, ierr = procs.wait("impostor", 60)
    procs.wait_for_line("leader", leader_log, "refused a connection authenticated as follower0")
    for name in ("follower0", "follower1"):
        procs.start(name, "follower", cfgs[name])
    codes = {name: procs.wait(name, 180) for name in ("leader", "follower0", "follower1")}
    # Assert: the impostor is told why (the key's owner and the name it claimed); the honest run finishes
    assert icode == 1 and "holds follower0's key but its messages claim to be 'follower1'" in ierr, ierr
    for name, (code, _, err) in codes.items():
        assert code == 0, f"{name}: {err}"
    assert "claims to be 'follower1'; still waiting for ['follower0', 'follower1']" in open(leader_log).read()


def test_forged_leader_delivers_no_message_to_a_follower(tmp_path, shards_small, procs):
    # Prepare: a server with its own fresh key pair, ready to send a path-traversal SAVE to anyone
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=4)
    port = _leader_port(cfgs["leader"])
    ctx = zmq.Context()
    fake = ctx.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    pub, sec = zmq.curve_keypair()
    fake.curve_server, fake.curve_publickey, fake.curve_secretkey = True, pub, sec
    fake.bind(f"tcp://127.0.0.1:{port}")
    try:
        # Execute
        procs.start("follower0", "follower", cfgs["follower0"])
        got_message = fake.poll(3000)
        code, _, err = procs.wait("follower0", 60)
    finally:
        fake.close()
        ctx.term()
    # Assert: no CURVE session formed, so nothing could be sent either way
    assert not got_message
    assert (
        code == 1
        and "timed out after 4 s awaiting PSI hello from the leader" in err
        and "the leader's key does not match" in err
    )
    assert not list(tmp_path.glob("**/*.pt"))


def test_second_process_with_a_partys_key_is_refused_and_the_run_finishes(tmp_path, shards_small, procs):
    # Prepare: two processes of follower0 (same key) both wait for the leader; whichever joins first is the party
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=30, train={"epochs": 2})
    for name in ("first", "second"):
        procs.start(name, "follower", cfgs["follower0"], "--out", str(tmp_path / name))
    for name in ("first", "second"):
        procs.wait_for_line(name, str(tmp_path / name / "follower0.log"), "connecting to")
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    results = {name: procs.wait(name, 180) for name in ("leader", "first", "second")}
    # Assert: the leader finished with one of them; the other was told why, in one line
    assert results["leader"][0] == 0, results["leader"][2]
    codes = sorted((results[n][0], n) for n in ("first", "second"))
    (ok_code, _), (dup_code, dup) = codes
    derr = results[dup][2]
    assert ok_code == 0 and dup_code == 1
    assert "party follower0 is already connected to this run" in derr and derr.count("\n") == 1


def test_follower_started_first_behind_a_forwarder_waits_for_the_leader(tmp_path, shards_small, procs):
    # Prepare: a forwarder that drops every connection while the leader is not up yet
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=30)
    proxy = Forwarder(free_port(), _leader_port(cfgs["leader"]))
    _edit(cfgs["follower0"], _connect_to(proxy._server.getsockname()[1]))
    try:
        # Execute
        procs.start("follower0", "follower", cfgs["follower0"])
        time.sleep(3.0)
        assert procs.procs["follower0"].poll() is None, procs.wait("follower0", 5)
        procs.start("leader", "leader", cfgs["leader"])
        results = {name: procs.wait(name, 180) for name in ("leader", "follower0")}
    finally:
        proxy.close()
    # Assert
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err}"


@pytest.mark.parametrize(
    "garbage, needle",
    [
        ({"dtype": ["float32"], "shape": [512, 2], "nbytes": 4096}, "dtype ['float32'] not allowed"),
        # the other two over a real run with `-m slow`; the in-memory fuzz (tests/wire/test_wire_fuzz.py) sends both
        pytest.param(
            {"dtype": "float32", "shape": [0] + [2**31] * 7, "nbytes": 0}, "spans more than", marks=pytest.mark.slow
        ),
        pytest.param("deep", "nests JSON too deeply", marks=pytest.mark.slow),
    ],
)
def test_insider_garbage_ends_the_run_with_one_line_and_an_abort(garbage, needle, tmp_path, shards_small, procs):
    # Prepare: the test itself is follower0 (its real key, a valid HELLO), then answers FORWARD with garbage
    import json

    from vfl.align.psi.follower_side import follower_psi
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.session.follower import FollowerSession
    from vfl.session.handshake import hello_message, new_nonce
    from vfl.wire import FollowerChannel, PeerAbort
    from vfl.wire.curve_keys import load_follower_keys
    from vfl.wire.frames import MAGIC
    from vfl.wire.messages import Welcome

    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=20)
    cfg = load_config(cfgs["follower0"])
    procs.start("leader", "leader", cfgs["leader"])
    ch = FollowerChannel(
        cfg.network.connect,
        "follower0",
        load_follower_keys(cfg.network.secret_key_file, cfg.network.leader_key_file),
        30,
    )
    try:
        shard = PartyShard(cfg.data.path)
        common, _ = follower_psi(ch, shard.all_ids())
        shard.restrict(common)
        welcome = FollowerSession(cfg, ch).greet(hello_message(cfg, shard, 0, new_nonce()), Welcome)  # probes echoed
        ch.run = welcome.run
        ch.recv(("FORWARD",))
        if garbage == "deep":
            header = b'{"type":"EMBEDDING","meta":' + b"[" * 30000 + b"]" * 30000 + b"}"
            frames = [MAGIC, header]
        else:
            seq = ch._send_seq["leader"]
            header = {
                "type": "EMBEDDING",
                "from": "follower0",
                "run": ch.run,
                "seq": seq,
                "meta": {"step": 0},
                "tensors": [garbage],
            }
            frames = [MAGIC, json.dumps(header).encode(), b""]
        # Execute
        ch._sock.send_multipart(frames)
        code, _, err = procs.wait("leader", 60)
        # Assert: one error line naming the field (a warning may precede it), no traceback, the insider told to stop
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 1 and len(errors) == 1 and needle in errors[0] and "Traceback" not in err, err
        with pytest.raises(PeerAbort, match=needle.split()[0]):
            ch.recv(("GRADIENT",))
    finally:
        ch.close()


def test_a_flooding_duplicate_connection_cannot_make_the_leader_blame_an_honest_follower(tmp_path):
    # Prepare: a leader channel; follower0 connects twice (its second connection floods and never reads)
    from vfl.wire import LeaderChannel
    from vfl.wire.curve_keys import load_leader_keys, load_public_key, load_secret_key

    keys = party_keys(str(tmp_path), ("leader", "follower0", "follower1"))
    port = free_port()
    leader = LeaderChannel(
        f"tcp://127.0.0.1:{port}",
        ("follower0", "follower1"),
        load_leader_keys(keys["leader"][1], {f: keys[f][0] for f in ("follower0", "follower1")}),
        4.0,
        "leader",
        max_message_bytes=1 << 20,
    )
    ctx = zmq.Context()

    def dealer(party, rcvhwm=1000):
        pub, sec = load_secret_key(keys[party][1])
        s = ctx.socket(zmq.DEALER)
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = load_public_key(keys["leader"][0]), pub, sec
        s.setsockopt(zmq.RCVHWM, rcvhwm)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        return s

    honest0 = dealer("follower0")
    honest0.send_multipart(encode("HELLO", "follower0", "", 0, {}))
    first = leader.recv("follower0", "HELLO")
    duplicate = dealer("follower0", rcvhwm=1)
    for _ in range(20_000):
        duplicate.send_multipart(encode("HELLO", "follower0", "", 0, {}))
    honest1 = dealer("follower1")
    give_up = (
        time.monotonic() + 20.0
    )  # the leader meets the duplicate first (on a loaded machine its handshake is slow)
    while leader.duplicates_refused == 0 and time.monotonic() < give_up:
        if leader._sock.poll(100, zmq.POLLIN):
            leader._read_one("the duplicate's flood")
    honest1.send_multipart(encode("HELLO", "follower1", "", 0, {}))
    # Execute
    try:
        got = leader.recv("follower1", "HELLO")
    finally:
        for s in (honest0, duplicate, honest1):
            s.close(0)
        ctx.term()
        leader.close()
    # Assert: the duplicate was refused once and ignored; follower1's HELLO arrived in time
    assert first.sender == "follower0" and got.sender == "follower1"
    assert leader.duplicates_refused == 1
