"""Slow, idle and oversized clients of the leader's HTTP endpoint, attacked live over tcp on 127.0.0.x (Linux routes
all of 127/8 to lo, so each 127.0.0.N is a client address of its own): they cannot keep an honest request from its
answer, a request has one deadline from accept for its headers and body, and a body is refused on its declared length
and its shape before any JSON object is built."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import tracemalloc
from concurrent.futures import Future

import pytest

from tests.support.serve_stand_ins import _Lines, _Scorer, until
from vfl.inference.serve import http_endpoint
from vfl.inference.serve.http_clients import MAX_HEAD_BYTES, ClientLimits
from vfl.inference.serve.http_endpoint import ScoreHTTPServer, parse_request
from vfl.inference.serve.leader import Scored, ServeError


class _Unknown:
    """Answers every id as unknown to the leader (so no follower is asked and no rate limit applies), counting calls."""

    followers, down, failed, batches, rows = ["f"], {}, None, 0, 0
    submits = 0

    def submit(self, ids, deadline_s):
        self.submits += 1
        future = Future()
        future.set_result(Scored([None] * len(ids), {i: "unknown to the leader" for i in range(len(ids))}))
        return future


@pytest.fixture
def serve():
    servers = []

    def start(limits: ClientLimits, max_rows: int = 16, scorer=None) -> ScoreHTTPServer:
        srv = ScoreHTTPServer(("127.0.0.1", 0), scorer or _Scorer(), max_rows, 1000, 7, _Lines(), limits)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _holds_any(server: ScoreHTTPServer, peers: list) -> bool:
    """Whether the endpoint still holds a slot for a connection from one of `peers` ((address, port) pairs)."""
    with server.clients._lock:
        socks = list(server.clients._clients)
    held = set()
    for sock in socks:
        try:
            held.add(sock.getpeername())
        except OSError:
            pass  # shut down (displaced): its slot is already free
    return any(tuple(p) in held for p in peers)


def _score(port: int, source: str, deadline_ms: int, sent_from: list | None = None) -> tuple[int, dict, float]:
    """(status, answer, seconds from connect to answer) of one honest request sent from `source` (its (address, port)
    appended to `sent_from`)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        c.connect()
        if sent_from is not None:
            sent_from.append(c.sock.getsockname())
        c.request(
            "POST",
            "/score",
            json.dumps({"ids": [1, 2], "deadline_ms": deadline_ms}),
            {"Content-Type": "application/json"},
        )
        r = c.getresponse()
        return r.status, json.loads(r.read()), time.monotonic() - t0
    finally:
        c.close()


class _Attacker(threading.Thread):
    """Holds one connection from `source` that sends nothing (idle) or one header byte every 0.1 s (trickle), and
    opens another 0.3 s after the endpoint closes it, until stopped."""

    def __init__(self, port: int, source: str, trickle: bool, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.source, self.trickle, self.stop, self.connects = port, source, trickle, stop, 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), 5, (self.source, 0)) as s:
                    self.connects += 1
                    s.settimeout(0.1)
                    if self.trickle:
                        s.sendall(b"POST /score HTTP/1.1\r\nX-Slow: ")
                    while not self.stop.is_set():
                        try:
                            if s.recv(4096) == b"":
                                break  # closed by the endpoint
                        except TimeoutError:
                            pass
                        if self.trickle:
                            s.sendall(b"a")
            except OSError:
                pass
            self.stop.wait(0.3)


def test_slow_and_idle_clients_on_several_addresses_cannot_keep_an_honest_request_from_its_answer(serve):
    # Prepare: 6 slots, 2 per address, a read deadline (30 s) far beyond the test; 12 attackers on 3 addresses,
    # half idle, half trickling a byte every 0.1 s, each reconnecting when closed: every slot is theirs
    server = serve(ClientLimits(max_connections=6, max_per_address=2, read_timeout_s=30.0))
    port, stop = server.server_address[1], threading.Event()
    attackers = [_Attacker(port, f"127.0.0.{2 + i % 3}", trickle=i % 2 == 1, stop=stop) for i in range(12)]
    for a in attackers:
        a.start()
    try:
        assert until(lambda: sum(a.connects for a in attackers) >= 12 and server.clients.stats()["connections"] == 6)
        # Execute: honest requests (deadline 1 s) from an address of their own and from an attacker's address, each
        # sent when the attackers hold every slot again
        answers, full, honest = [], [], []
        before = server.clients.stats()["displaced"]
        for source in ["127.0.0.1", "127.0.0.3"] * 5:
            full.append(until(lambda: server.clients.stats()["connections"] == 6 and not _holds_any(server, honest)))
            answers.append(_score(port, source, 1000, honest))
        during = server.clients.stats()
    finally:
        stop.set()
        for a in attackers:
            a.join(timeout=10)
    # Assert: every honest request scored within its deadline; no address ever held more than its 2 slots
    assert [(status, doc.get("scores")) for status, doc, _ in answers] == [(200, [0.5, 0.5])] * 10, answers
    assert max(seconds for _, _, seconds in answers) < 1.0, answers
    assert during["most_from_one_address"] <= 2 and during["connections"] <= 6, during
    # each honest request arrived with every slot held by an attacker (the previous honest connection's slot already
    # released), so each displaced one; the attackers' own displacements depend on when their reconnects land
    assert all(full) and during["displaced"] - before >= 10, during


def test_a_trickling_client_is_closed_at_its_whole_request_deadline_counted_from_accept_and_its_slot_freed(serve):
    # Prepare: a 1 s read deadline; a client that sends a header byte every 0.1 s (never 0.1 s of silence)
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=1.0))
    s = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)
    t0, got = time.monotonic(), b""
    s.sendall(b"POST /score HTTP/1.1\r\nX-Slow: ")
    s.settimeout(0.1)
    # Execute: trickle until the endpoint closes the connection
    try:
        while time.monotonic() - t0 < 10:
            try:
                chunk = s.recv(4096)
                got += chunk
                if chunk == b"":
                    break
            except TimeoutError:
                s.sendall(b"a")
    except OSError:
        pass
    closed_after = time.monotonic() - t0
    s.close()
    # Assert: closed with a 408 at about 1 s from accept (not after a second of silence, which never came)
    assert 0.9 <= closed_after < 2.5, closed_after
    assert got.startswith(b"HTTP/1.1 408 ") and b"within 1 s" in got, got
    assert until(lambda: server.clients.stats()["connections"] == 0)
    assert server.clients.stats()["timed_out"] == 1


def test_an_idle_keep_alive_connection_is_closed_a_read_deadline_after_its_answer(serve):
    # Prepare: a 1 s read deadline; one request answered on a keep-alive connection
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=1.0))
    c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    c.request("POST", "/score", b'{"ids": [1]}', {"Content-Type": "application/json"})
    first = c.getresponse()
    first.read()
    t0 = time.monotonic()
    # Execute: wait silent until the endpoint closes it
    c.sock.settimeout(10)
    tail = c.sock.recv(4096)
    idle_for = time.monotonic() - t0
    c.close()
    # Assert: answered, then closed (a 408) about 1 s after the answer
    assert first.status == 200 and tail.startswith(b"HTTP/1.1 408 ")
    assert 0.8 <= idle_for < 2.5, idle_for
    assert until(lambda: server.clients.stats()["connections"] == 0)


def test_a_body_declared_over_the_limit_is_refused_before_a_byte_of_it_is_sent(serve):
    # Prepare: 16 ids at most, so a body of at most 1024 + 256 x 16 = 5,120 bytes; a client that declares 1 MiB
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=5.0), max_rows=16)
    s = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=3)
    head = f"POST /score HTTP/1.1\r\nHost: 127.0.0.1:{server.server_address[1]}\r\nContent-Type: application/json\r\n"
    # Execute: the headers alone, no body
    s.sendall((head + f"Content-Length: {1 << 20}\r\n\r\n").encode())
    answer = s.makefile("rb").read().decode()  # the endpoint answers and closes; a timeout here fails the test
    s.close()
    # Assert: 413 naming the limit and the value
    assert answer.startswith("HTTP/1.1 413 "), answer
    assert "Content-Length must be in [0, 5120]" in answer and "'1048576'" in answer


def test_request_headers_over_their_budget_get_431_and_the_connection_closed(serve):
    # Prepare: a client that sends a header line longer than the 16 KiB that request line and headers may take
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=5.0))
    s = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=3)
    # Execute
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 65536))
    except OSError:
        pass  # the endpoint closed the connection mid-send
    try:
        answer = s.makefile("rb").read()
    except ConnectionResetError:
        answer = b"(reset)"
    s.close()
    # Assert: 431, or a reset carrying it (closing with unread bytes), counted; the slot freed
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"(reset)", answer[:200]
    assert until(lambda: server.clients.stats()["connections"] == 0)
    assert server.clients.stats()["too_large"] == 1


def _request(port: int, ids: list) -> bytes:
    body = json.dumps({"ids": ids}, ensure_ascii=False).encode()
    head = f"POST /score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _unread(port: int, source: str, data: bytes) -> socket.socket:
    """A connection from `source` with a 1 KiB receive buffer that sends `data` and never reads."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(data)
    return s


def test_clients_that_never_read_their_answers_cannot_keep_an_honest_request_from_its_answer(serve):
    """The review's repro: 4 slots, each held by a client that pipelined two valid requests of 1024 long ids (unknown
    to the leader, so the answers echo them: ~830 KB each before the echo was capped) and never reads. Their answers'
    writes blocked for the read deadline (30 s here) while the connections counted as working: an honest request got
    503. Now a connection whose answer is not taken is writing, and displaceable; a long missing id is named by its
    index alone, a short one is echoed."""
    # Prepare
    scorer = _Unknown()
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=30.0), 1024, scorer)
    port = server.server_address[1]
    pipelined = _request(port, ["\U0001f600" * 61 + f"{i:04d}" for i in range(1024)]) * 2
    held = [_unread(port, "127.0.0.2", pipelined) for _ in range(4)]
    try:
        assert until(lambda: server.clients.stats()["connections"] == 4 and scorer.submits >= 4)
        time.sleep(0.5)  # each answer's write has blocked
        # Execute
        answers = [_score(port, "127.0.0.1", 1000) for _ in range(3)]
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request(
            "POST", "/score", json.dumps({"ids": ["x" * 200, "cust-000042"]}), {"Content-Type": "application/json"}
        )
        echo = json.loads(c.getresponse().read())
        c.close()
    finally:
        for s in held:
            s.close()
    # Assert: every honest request answered within its deadline (the first by displacing an unread connection)
    assert [(status, doc.get("scores")) for status, doc, _ in answers] == [(200, [None, None])] * 3, answers
    assert max(seconds for _, _, seconds in answers) < 1.0, answers
    assert server.clients.stats()["displaced"] >= 1 and server.clients.stats()["refused"] == 0
    assert echo["missing"] == [
        {"index": 0, "reason": "unknown to the leader"},
        {"index": 1, "id": "cust-000042", "reason": "unknown to the leader"},
    ]


def test_an_answer_not_taken_is_closed_at_the_deadline_and_a_pipelined_request_waits_for_it(serve):
    """A client that pipelines 60 small requests and reads nothing: the endpoint reads the next request only once the
    previous answer is acknowledged, so it scores only what the client's 2 KiB receive window takes (it scored all 60
    into its own send buffer before); the answer it cannot send is closed 1 s (the read deadline) after its first
    byte, counted as timed out, and the slot is free."""
    # Prepare
    scorer = _Unknown()
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=1.0), 16, scorer)
    port = server.server_address[1]
    # Execute
    s = _unread(port, "127.0.0.1", _request(port, [1, 2]) * 60)
    try:
        assert until(lambda: scorer.submits >= 1)
        freed = until(lambda: server.clients.stats()["connections"] == 0, timeout_s=8.0)
    finally:
        s.close()
    # Assert
    assert freed and server.clients.stats()["timed_out"] == 1, server.clients.stats()
    assert 1 <= scorer.submits <= 30, scorer.submits


def test_a_request_whose_body_is_arriving_is_not_displaced_by_idle_clients_on_its_address(serve):
    """The review's repro (a client on the honest client's address, as behind NAT or on the loopback): the honest
    request's headers and 100 bytes of its body have arrived when 16 idle connections come from its address (16 its
    share); the newcomers take the idle ones' slots (least progress), never the request's, which is answered."""
    # Prepare
    server = serve(ClientLimits(), 1024)
    port = server.server_address[1]
    body = json.dumps({"ids": list(range(1000))}).encode()
    honest = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = f"POST /score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    honest.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:100])
    time.sleep(0.3)
    # Execute
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(16)]
    try:
        assert until(lambda: server.clients.stats()["displaced"] >= 1)
        time.sleep(0.3)
        honest.sendall(body[100:])
        answer = honest.makefile("rb").readline()
    finally:
        honest.close()
        for s in idle:
            s.close()
    # Assert
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert server.clients.stats()["displaced"] == 1


def test_a_body_arriving_on_pace_is_never_displaced_even_by_faster_newcomers_of_its_address(serve):
    """2 slots for the address; an honest body of 60 KB arriving at 40 KB/s (over the 16 KiB/s minimum) while a
    client of the same address opens a connection every 0.1 s and sends 15 KB of headers at once (more bytes a second
    than the honest request): each newcomer displaces the previous one, never the request on pace, which is
    answered. (Before: the longest-reading, the honest request, was displaced; by progress alone it would be too.)"""
    # Prepare
    server = serve(ClientLimits(max_connections=8, max_per_address=2, read_timeout_s=30.0), 1024)
    port, stop = server.server_address[1], threading.Event()
    body = json.dumps({"ids": list(range(10_000, 10_000 + 1000))}).encode() + b" " * 50_000
    head = f"POST /score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"

    def newcomers():
        conns = []
        while not stop.is_set():
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                c.sendall(b"POST /score HTTP/1.1\r\nX-Pad: " + b"a" * 15_000)
                conns.append(c)
            except OSError:
                pass
            stop.wait(0.1)
        for c in conns:
            c.close()

    honest = socket.create_connection(("127.0.0.1", port), timeout=5)
    honest.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode())
    flood = threading.Thread(target=newcomers, daemon=True)
    flood.start()
    # Execute: 2 KB every 50 ms
    try:
        for at in range(0, len(body), 2_000):
            honest.sendall(body[at : at + 2_000])
            time.sleep(0.05)
        answer = honest.makefile("rb").readline()
    except OSError as e:
        answer = repr(e).encode()
    finally:
        stop.set()
        flood.join(timeout=10)
        honest.close()
    # Assert
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert server.clients.stats()["displaced"] >= 10


_ATTACKS = {  # each ~256 KiB, the body limit at the default 1024 ids: (body, status, words of the reason)
    "objects": (b'{"ids": [' + b"{}," * 87_000 + b"{}]}", 400, "87002 objects"),  # the red team's body
    "arrays": (b'{"ids": [' + b"[]," * 87_000 + b"[]]}", 400, "87002 arrays"),
    "integers": (b'{"ids": [' + b"1," * 130_000 + b"1]}", 413, "more than 1024 ids"),
    "strings": (b'{"ids": [' + b'"",' * 87_000 + b'""]}', 413, "more than 1026 strings"),
    "escapes": (b'{"ids": [' + b'"\\",' * 52_000 + b'""]}', 413, "more than 1026 strings"),
    "utf16": ('{"ids": [[[[1]]]]}'.encode("utf-16-le"), 400, "not UTF-8"),
}


@pytest.mark.parametrize("shape", sorted(_ATTACKS))
def test_a_body_of_too_many_or_nested_ids_is_refused_before_any_json_object_is_built(shape, monkeypatch):
    # Prepare: a body of many empty objects, arrays, numbers or strings, or nested arrays in UTF-16 (which json.loads
    # reads too); json.loads replaced by a spy
    (body, status, words), parsed = _ATTACKS[shape], []
    monkeypatch.setattr(http_endpoint.json, "loads", lambda b, *a, **k: parsed.append(b) or {})
    tracemalloc.start()
    # Execute
    try:
        with pytest.raises(ServeError, match=words) as e:
            parse_request(body, max_rows=1024, default_deadline_ms=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Assert: refused with the reason, the parser never given the body, no copy of it allocated
    assert e.value.status == status
    assert parsed == []
    assert peak <= 64 * 1024, peak


def test_brackets_commas_and_quotes_inside_id_strings_are_not_counted_as_structure():
    # Prepare: 8 string ids (the most) full of what the shape check counts outside strings, escaped quotes included
    ids = ['[{"a", "b"}]', "x,y,z,w,v,u,t,s,r", '\\"[', "{", "]", "}", '"', ","]
    body = json.dumps({"ids": ids, "deadline_ms": 50}).encode()
    # Execute
    given, _, deadline = parse_request(body, max_rows=8, default_deadline_ms=100)
    # Assert: read as the 8 ids they are
    assert given == ids and deadline == 50


@pytest.mark.parametrize(
    "limits, words",
    [
        (ClientLimits(0, 1, 1.0), r"--max-connections must be in \[1, 4096\], got 0"),
        (ClientLimits(4, 5, 1.0), r"--max-per-address must be in \[1, --max-connections=4\], got 5"),
        (ClientLimits(4, 2, 0.0), r"--read-timeout-s must be in \(0, 600\], got 0.0"),
    ],
)
def test_client_limits_out_of_their_domain_are_refused_naming_the_value(limits, words):
    # Prepare / Execute / Assert: the server is not built
    with pytest.raises(ValueError, match=words):
        ScoreHTTPServer(("127.0.0.1", 0), _Scorer(), 16, 1000, 7, _Lines(), limits)


def test_a_request_the_standard_library_cannot_parse_gets_a_short_json_answer_written_like_any_other(serve):
    # Prepare: an unknown method of 15,000 characters that html-escape five-fold (the standard library's own error
    # page would echo it twice: about 96 KiB, written with a blocking send while the slot counts its request arrived)
    server = serve(ClientLimits(max_connections=4, max_per_address=4, read_timeout_s=5.0))
    s = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)
    # Execute
    try:
        s.sendall(b"&" * 15_000 + b" / HTTP/1.1\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    # Assert: 501 in a few hundred bytes, a JSON error that echoes nothing of the request, the slot freed
    assert head.startswith(b"HTTP/1.1 501 ") and b"Connection: close" in head, head
    assert len(answer) < 400 and b"&" not in answer, answer[:200]
    assert json.loads(body)["error"].startswith("Not Implemented")
    assert until(lambda: server.clients.stats()["connections"] == 0)
