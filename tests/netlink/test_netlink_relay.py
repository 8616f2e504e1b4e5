"""The shipped WAN link (vfl/netlink/relay.py): bytes intact and in order, RTT at least the configured one, a bulk
transfer no faster than the configured bandwidth, bounded buffering, clean shutdown; and as a process.

Every timing assertion points the robust way: a delay can only grow under load (a lower bound on RTT, an upper bound
on throughput); the one upper bound on RTT has a slack of seconds."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.paths import REPO
from vfl.netlink.relay import LinkDirection, LinkSpec, Relay, parse_hostport


class EchoServer:
    """127.0.0.1 on a free port: echoes every byte of every connection back, in a thread per connection."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        with conn:
            try:
                while data := conn.recv(1 << 16):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.server.close()


class SinkServer:
    """127.0.0.1 on a free port: reads each connection to its end, recording (bytes, seconds from first to last)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.result: tuple[int, float] | None = None
        self.thread = threading.Thread(target=self._sink, daemon=True)
        self.thread.start()

    def _sink(self):
        conn, _ = self.server.accept()
        with conn:
            total, first = 0, None
            while data := conn.recv(1 << 16):
                first = first or time.monotonic()
                total += len(data)
            self.result = (total, time.monotonic() - (first or time.monotonic()))

    def close(self):
        self.thread.join(60)
        self.server.close()


def roundtrip(sock, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(1 << 16)
        assert chunk, "connection closed early"
        got += chunk
    return got


def test_bytes_arrive_intact_and_in_order_both_ways_under_jitter():
    # Prepare: 3 MiB of random bytes through a jittery link (jitter never reorders a stream)
    echo = EchoServer()
    payload = random.Random(1).randbytes(3 << 20)
    got = bytearray()
    try:
        with Relay(("127.0.0.1", echo.port), LinkSpec(rtt_ms=10, jitter_ms=5), seed=3) as relay:
            with socket.create_connection(relay.address, timeout=30) as s:
                reader = threading.Thread(target=lambda: _read_all(s, got), daemon=True)
                reader.start()
                # Execute: many small writes, so many chunks get their own jittered delay
                for i in range(0, len(payload), 4096):
                    s.sendall(payload[i : i + 4096])
                s.shutdown(socket.SHUT_WR)
                reader.join(60)
            # Assert
            assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
            assert relay.bytes_up == len(payload) and relay.bytes_down == len(payload)
    finally:
        echo.close()


def _read_all(sock, into: bytearray):
    while data := sock.recv(1 << 16):
        into += data


def test_an_echo_round_trip_takes_at_least_the_configured_rtt():
    # Prepare
    echo = EchoServer()
    rtt_s = 0.08
    try:
        with Relay(("127.0.0.1", echo.port), LinkSpec(rtt_ms=rtt_s * 1000)) as relay:
            with socket.create_connection(relay.address, timeout=30) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                roundtrip(s, b"warm")  # the relay's upstream connection is open
                # Execute
                times = []
                for i in range(5):
                    t0 = time.monotonic()
                    assert roundtrip(s, bytes([i]) * 100) == bytes([i]) * 100
                    times.append(time.monotonic() - t0)
        # Assert: a lower bound (robust under load), and an upper bound with seconds of slack
        assert min(times) >= rtt_s, times
        assert max(times) < rtt_s + 5.0, times
    finally:
        echo.close()


def test_a_jittered_round_trip_is_at_least_the_rtt_less_twice_the_jitter():
    # Prepare
    echo = EchoServer()
    try:
        with Relay(("127.0.0.1", echo.port), LinkSpec(rtt_ms=60, jitter_ms=20), seed=7) as relay:
            with socket.create_connection(relay.address, timeout=30) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # Execute
                times = []
                for _ in range(8):
                    t0 = time.monotonic()
                    roundtrip(s, b"x" * 10)
                    times.append(time.monotonic() - t0)
        # Assert: each one-way delay is 30 ms +- 20 ms, so a round trip is at least 20 ms
        assert min(times) >= 0.020, times
    finally:
        echo.close()


def test_a_bulk_transfer_is_no_faster_than_the_configured_bandwidth():
    # Prepare: 4 MiB over 20 Mbit/s takes >= 1.68 s of serialisation
    sink = SinkServer()
    size, mbit = 4 << 20, 20.0
    with Relay(("127.0.0.1", sink.port), LinkSpec(rtt_ms=2, bandwidth_mbit=mbit)) as relay:
        with socket.create_connection(relay.address, timeout=30) as s:
            # Execute
            t0 = time.monotonic()
            s.sendall(os.urandom(size))
            s.shutdown(socket.SHUT_WR)
            sink.close()
            elapsed = time.monotonic() - t0
    # Assert: throughput at most the bandwidth (the first chunk's serialisation is the only slack: 64 KiB)
    total, _ = sink.result
    assert total == size
    assert elapsed >= (size - 65536) * 8 / (mbit * 1e6), elapsed
    assert relay.bytes_up == size


def test_a_direction_holds_at_most_its_buffer_and_blocks_the_reader_beyond():
    # Prepare: a 1 Mbit/s link whose buffer takes 256 KiB; nobody takes chunks off it
    spec = LinkSpec(rtt_ms=1000, bandwidth_mbit=1, buffer_bytes=256 << 10)
    link = LinkDirection(spec, random.Random(0), lambda n: None)
    chunk = b"z" * 65536
    filled = [link.put(chunk) for _ in range(4)]
    # Execute: a fifth chunk must wait for room (in a thread), until the direction closes
    fifth: list[bool] = []
    t = threading.Thread(target=lambda: fifth.append(link.put(chunk)), daemon=True)
    t.start()
    t.join(1.0)
    blocked = t.is_alive()
    link.close()
    t.join(2.0)
    # Assert
    assert filled == [True] * 4 and link.held == 4 * 65536
    assert blocked and fifth == [False]


def test_chunks_are_scheduled_by_serialisation_then_propagation_never_out_of_order():
    # Prepare: 8 Mbit/s = 1 MB/s, 100 ms RTT, 40 ms jitter
    link = LinkDirection(LinkSpec(rtt_ms=100, bandwidth_mbit=8, jitter_ms=40), random.Random(5), lambda n: None)
    # Execute: ten 100 kB chunks read at t = 0
    arrivals = [link.schedule(b"a" * 100_000, 0.0) for _ in range(10)]
    # Assert: the i-th leaves the link at 0.1 (i + 1) s, arrives 50 +- 40 ms later, never before the previous one
    assert arrivals == sorted(arrivals)
    for i, a in enumerate(arrivals):
        assert 0.1 * (i + 1) + 0.010 - 1e-9 <= a <= 0.1 * (i + 1) + 0.090 + 1e-9


def test_closing_the_relay_cuts_open_connections_and_stops_its_threads():
    # Prepare
    echo = EchoServer()
    relay = Relay(("127.0.0.1", echo.port), LinkSpec(rtt_ms=20)).start()
    s = socket.create_connection(relay.address, timeout=10)
    roundtrip(s, b"hello")
    before = threading.active_count()
    # Execute
    relay.close()
    # Assert: the client sees the end of its stream; the relay's threads are gone; the port no longer accepts
    s.settimeout(10)
    assert s.recv(10) == b""
    s.close()
    assert threading.active_count() <= before - 5  # the acceptor and the connection's four pipes
    with pytest.raises(OSError):
        socket.create_connection(relay.address, timeout=2).close()
    echo.close()


def test_link_spec_and_endpoints_refuse_bad_values_in_one_line():
    # Execute / Assert
    with pytest.raises(ValueError, match="rtt_ms must be a finite number >= 0, got rtt_ms=-1"):
        LinkSpec(rtt_ms=-1)
    with pytest.raises(ValueError, match="jitter_ms must be at most the one-way delay"):
        LinkSpec(rtt_ms=10, jitter_ms=6)
    with pytest.raises(ValueError, match="--to must be HOST:PORT"):
        parse_hostport("localhost", "--to")
    assert parse_hostport("tcp://127.0.0.1:7000", "--to") == ("127.0.0.1", 7000)


def test_the_relay_runs_as_a_process_and_exits_cleanly_on_sigterm():
    # Prepare
    from vfl.ports import free_port

    echo = EchoServer()
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vfl.netlink",
            "relay",
            "--listen",
            f"127.0.0.1:{port}",
            "--to",
            f"127.0.0.1:{echo.port}",
            "--rtt-ms",
            "30",
            "--bandwidth-mbit",
            "100",
            "--jitter-ms",
            "5",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "relay 127.0.0.1:" in proc.stdout.readline()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            # Execute
            t0 = time.monotonic()
            got = roundtrip(s, b"through a process")
            elapsed = time.monotonic() - t0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        echo.close()
    # Assert
    assert got == b"through a process" and elapsed >= 0.030 - 0.010
    assert proc.returncode == 0, err
    assert "1 connection(s), 17 B up, 17 B down" in out
