"""The leader's HTTP endpoint on 127.0.0.1 with a stand-in scorer: bounded (connections, queue, body shape), quiet
when a client goes away. Its defences against slow, idle and oversized clients are in test_serve_http_clients.py."""

from __future__ import annotations

import http.client
import json
import socket
import threading

import numpy as np
import pytest

from tests.support.serve_stand_ins import _Lines, _Scorer, until
from vfl.inference.serve.http_clients import ClientLimits
from vfl.inference.serve.http_endpoint import ScoreHTTPServer


@pytest.fixture
def server():
    srv = ScoreHTTPServer(("127.0.0.1", 0), _Scorer(), 16, 1000, 7, _Lines(), ClientLimits(2, 2, 10.0))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _post(port: int, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/score", body=body, headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    status, doc = r.status, json.loads(r.read())
    c.close()
    return status, doc


def test_nested_json_gets_400_with_the_reason(server):
    # Prepare: arrays nested 2,000 deep, inside the body limit (16 ids: 5,120 bytes)
    body = b'{"ids": ' + b"[" * 2_000 + b"]" * 2_000 + b"}"
    # Execute
    status, doc = _post(server.server_address[1], body)
    # Assert: an answer, not a dropped connection
    assert status == 400 and "flat list" in doc["error"] and "2000 arrays" in doc["error"]


def test_connections_beyond_the_bound_get_503_when_none_is_waiting_for_its_request_and_a_freed_slot_serves_again(
    server,
):
    port = server.server_address[1]
    # Prepare: two requests held by the scorer (the bound is 2), so no connection is waiting for its request
    gate = threading.Event()
    held = server.worker.hold = gate
    answers = []
    clients = [threading.Thread(target=lambda: answers.append(_post(port, b'{"ids": [1]}'))) for _ in range(2)]
    for t in clients:
        t.start()
    assert until(lambda: server.worker.waiting >= 2)
    # Execute: a third client; then the held requests are answered and a fourth comes
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # answered before it sends a byte
        third = s.makefile("rb").read().decode()
    held.set()
    for t in clients:
        t.join(timeout=10)
    assert until(lambda: not server.clients.stats()["connections"])  # the handlers saw the clients close: slots freed
    fourth = _post(port, json.dumps({"ids": [1]}).encode())
    # Assert: 503 naming the bound, then scores again
    assert third.startswith("HTTP/1.1 503 ") and "at most 2" in json.loads(third.split("\r\n\r\n")[1])["error"]
    assert server.clients.refused == 1 and [a[0] for a in answers] == [200, 200]
    assert fourth == (200, {**fourth[1], "scores": [0.5]})


def test_a_client_that_went_away_is_counted_and_another_error_is_one_line(server):
    # Prepare / Execute: the server's error hook inside a client's broken pipe, then inside another error
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        server.handle_error(None, ("127.0.0.1", 5555))
    try:
        raise ValueError("odd")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 5555))
    # Assert: the disconnect only counted, the other error one line in the leader's log
    assert server.disconnects == 1
    assert server.log.lines == ["leader: HTTP client 127.0.0.1: ValueError: odd"]


def test_the_scorers_queue_is_bounded():
    from tests.support.serve_in_memory import _leader_model, _RecordingChannel, _Table
    from vfl.inference.serve.leader import ScoringWorker, ServeError

    # Prepare: a scorer not yet running, whose queue holds at most 2 requests
    worker = ScoringWorker(_RecordingChannel(), ["f"], {"f": 3}, _leader_model(1), _Table(1), None, 64)
    worker.max_queued = 2
    # Execute
    futures = [worker.submit(np.array([1]), 5.0) for _ in range(3)]
    # Assert: the third is refused at once, 503
    assert not futures[0].done() and not futures[1].done()
    with pytest.raises(ServeError, match="queue is full") as e:
        futures[2].result(timeout=0)
    assert e.value.status == 503 and e.value.retry_ms is not None


class _DownScorer:
    """A scorer whose follower `f` is down (restarting): every request fails as ScoringWorker._check_up fails it."""

    followers, down, failed, batches, rows = ["f"], {"f": "f is down (its connection dropped)"}, None, 0, 0

    def submit(self, ids, deadline_s):
        from concurrent.futures import Future

        from vfl.inference.serve.leader import DOWN_RETRY_MS, ServeError

        future = Future()
        future.set_exception(ServeError(503, self.down["f"], DOWN_RETRY_MS))
        return future


def test_a_request_while_a_follower_is_down_gets_503_with_retry_after():
    # Prepare: an endpoint whose scorer's follower is down (a restarted follower greets again meanwhile)
    srv = ScoreHTTPServer(("127.0.0.1", 0), _DownScorer(), 16, 1000, 7, _Lines(), ClientLimits(2, 2, 10.0))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        # Execute
        c = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
        c.request("POST", "/score", body=b'{"ids": [1]}', headers={"Content-Type": "application/json"})
        r = c.getresponse()
        status, retry_after, doc = r.status, r.getheader("Retry-After"), json.loads(r.read())
        c.close()
    finally:
        srv.shutdown()
        srv.server_close()
    # Assert: 503, the reason in one line, and when to retry (whole seconds; the body's retry_ms too)
    assert status == 503 and "f is down" in doc["error"]
    assert retry_after == "1" and doc["retry_ms"] == 1000


@pytest.mark.parametrize(
    "headers, status, words",
    [
        ({"Content-Type": "text/plain"}, 415, "Content-Type must be application/json"),
        ({"Host": "scores.attacker.example:{port}"}, 403, "Host header 'scores.attacker.example"),
        ({"Origin": "http://attacker.example"}, 403, "Origin 'http://attacker.example'"),
        ({"Host": "localhost:{port}", "Origin": "http://localhost:{port}"}, 200, None),
    ],
)
def test_a_request_a_web_page_could_send_is_refused(server, headers, status, words):
    # Prepare: the headers of a cross-site form post (text/plain) or of a DNS-rebinding page (its own host name)
    port = server.server_address[1]
    headers = {k: v.format(port=port) for k, v in headers.items()}
    # Execute
    got, doc = _post(port, json.dumps({"ids": [1]}).encode(), headers)
    # Assert: refused with the reason; a request to the loopback name is scored
    assert got == status, doc
    assert (words in doc["error"]) if words else doc["scores"] == [0.5]
