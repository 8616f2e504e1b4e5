"""The leader's local HTTP JSON endpoint for online scoring (Python's http.server, 127.0.0.1 by default).

    POST /score  {"ids": [17, "cust-000042", ...], "deadline_ms": 200}   (Content-Type: application/json)
      200 {"scores": [0.12, null, ...], "missing": [{"index": 1, "id": "cust-000042", "reason": "unknown to shop"}],
           "step": 1600, "ms": 1.9}
      400 bad request, 413 too many ids, 415 not JSON, 429 a follower's rate limit (retry_ms), 503 a follower is
      down, 504 the deadline passed; every error is {"error": "<one line>"}.
    A request whose Host (or Origin) is not the endpoint's own address or a loopback name gets 403: a web page that
    the leader's browser opens can neither post a form to it (text/plain is refused; application/json from another
    origin needs a CORS preflight, which this endpoint does not answer) nor reach it under a rebound DNS name.
    GET /health  {"status": "ok" | "degraded" | "stopped", "scorer": "running", "followers": {"shop": "up"},
                  "step": 1600, "batches": .., "rows": ..}

An id is what the party files' id column holds: an integer, or any text (hashed as vfl/data/ids.py does). A score is
a probability (binary), K class probabilities (multiclass) or the value in the label's units (regression).

Why the standard library: the endpoint is local to the leader (a serving stack, or a process beside it, calls it),
requests are small JSON documents, and the scoring itself runs in one worker thread that owns the ZeroMQ socket
(serve_leader.py), so an HTTP framework's event loop would buy no throughput; `ThreadingHTTPServer` with HTTP/1.1
keep-alive (one thread per client connection) needs no dependency and no code of ours for the protocol.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from vfl.inference.serve_leader import ServeError

MAX_BODY_BYTES = 1 << 20
MAX_DEADLINE_MS = 60_000
MAX_CONNECTIONS = 64  # client connections served at once (a thread each); one more gets 503 and is closed
_INT64 = (-(2**63), 2**63 - 1)


def parse_request(body: bytes, max_rows: int, default_deadline_ms: int) -> tuple[list, np.ndarray, int]:
    """(the ids as given, their int64 ids, deadline_ms) of a /score body; ServeError(400 or 413) naming the problem."""
    try:
        return _parse(body, max_rows, default_deadline_ms)
    except RecursionError:
        raise ServeError(400, "the body nests JSON arrays or objects too deeply") from None


def _parse(body: bytes, max_rows: int, default_deadline_ms: int) -> tuple[list, np.ndarray, int]:
    from vfl.data.ids import ids64

    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ServeError(400, f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict) or "ids" not in doc:
        raise ServeError(400, 'the body must be a JSON object {"ids": [...], "deadline_ms": N}')
    unknown = sorted(set(doc) - {"ids", "deadline_ms"})
    if unknown:
        raise ServeError(400, f"unknown key {unknown[0]!r}; allowed: ids, deadline_ms")
    given = doc["ids"]
    if not isinstance(given, list) or not given:
        raise ServeError(400, f"ids must be a non-empty list of integers or strings, got {str(given)[:80]}")
    if len(given) > max_rows:
        raise ServeError(413, f"{len(given)} ids in one request; at most {max_rows} (--max-rows)")
    deadline = doc.get("deadline_ms", default_deadline_ms)
    if isinstance(deadline, bool) or not isinstance(deadline, int) or not 1 <= deadline <= MAX_DEADLINE_MS:
        raise ServeError(400, f"deadline_ms must be an integer in [1, {MAX_DEADLINE_MS}], got {deadline!r}")
    if all(type(i) is int and _INT64[0] <= i <= _INT64[1] for i in given):
        return given, np.asarray(given, np.int64), deadline
    bad = next((i for i in given if isinstance(i, bool) or not isinstance(i, (int, str)) or i == ""), None)
    if bad is not None:
        raise ServeError(400, f"an id must be an integer or a non-empty string, got {json.dumps(bad)[:80]}")
    return given, ids64([str(i) for i in given]), deadline


def endpoint_names(host: str, port: int) -> set[str]:
    """The Host headers this endpoint answers (lower case): its own address and the loopback names, with its port.
    Any other (a DNS-rebinding page's own name) is refused; a wildcard address adds this machine's names."""
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
    if host in ("", "0.0.0.0", "::"):
        names |= {socket.gethostname(), socket.getfqdn()}
    return {f"{n}:{port}".lower() for n in names}


class ScoreHTTPServer(ThreadingHTTPServer):
    """The HTTP server; its handler reads `worker`, `max_rows`, `deadline_ms`, `step` and `log` from here."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: many clients connecting at once are not made to retry (1 s)

    def __init__(
        self,
        address: tuple[str, int],
        worker,
        max_rows: int,
        deadline_ms: int,
        step: int,
        log=None,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.worker, self.max_rows, self.deadline_ms, self.step = worker, max_rows, deadline_ms, step
        self.log, self.max_connections = log, max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self.busy_refused = self.disconnects = 0
        busy = json.dumps({"error": f"too many client connections (at most {max_connections}); retry later"})
        self._busy = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(busy)}\r\n\r\n{busy}"
        ).encode()
        super().__init__(address, ScoreHandler)
        self.hosts = endpoint_names(address[0], self.server_address[1])

    def process_request(self, request, client_address) -> None:
        """Serve the connection in a thread of its own, unless max_connections are served already: then 503."""
        if not self._slots.acquire(blocking=False):
            self.busy_refused += 1
            try:
                request.sendall(self._busy)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """One line in the leader's log (a client that went away is only counted), never a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            self.disconnects += 1
        elif self.log is not None:
            self.log.warning(f"leader: HTTP client {client_address[0]}: {type(error).__name__}: {error}")


class ScoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client's connection (and its thread) serves many requests
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK would add 40 ms
    timeout = 60  # seconds a client's connection may stay silent (mid-request or idle between requests)
    server: ScoreHTTPServer

    def _foreign(self) -> bool:
        """Refuse (403) a request whose Host or Origin is not this endpoint's own address: a web page the leader's
        browser opened (cross-site, or a DNS-rebinding name) must not read or request scores."""
        host = (self.headers.get("Host") or "").lower()
        origin = self.headers.get("Origin")
        if host not in self.server.hosts:
            why = f"the Host header {host[:80]!r} is not this endpoint's address"
        elif origin is not None and origin.lower().removeprefix("http://") not in self.server.hosts:
            why = f"the Origin {origin[:80]!r} is not this endpoint's address"
        else:
            return False
        self.close_connection = True
        self._reply(403, {"error": f"{why} ({', '.join(sorted(self.server.hosts))}): refused"})
        return True

    def do_POST(self) -> None:
        t0 = time.perf_counter()
        if self._foreign():
            return None
        if self.path.split("?")[0] != "/score":
            return self._reply(404, {"error": f"no such endpoint {self.path[:80]!r}: POST /score, GET /health"})
        if self.headers.get_content_type() != "application/json":
            self.close_connection = True
            return self._reply(415, {"error": "Content-Type must be application/json"})
        try:
            length = int(self.headers.get("Content-Length") or -1)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            return self._reply(
                413 if length > MAX_BODY_BYTES else 411, {"error": f"Content-Length must be in [0, {MAX_BODY_BYTES}]"}
            )
        body = self.rfile.read(length)
        try:
            given, ids, deadline_ms = parse_request(body, self.server.max_rows, self.server.deadline_ms)
            future = self.server.worker.submit(ids, deadline_ms / 1000)
            try:  # the worker answers by the deadline; this guard only catches a worker that stopped
                result = future.result(timeout=deadline_ms / 1000 + 1.0)
            except TimeoutError:
                raise ServeError(504, "the scorer did not answer in time") from None
        except ServeError as e:
            doc = {"error": str(e)}
            if e.retry_ms is not None:
                doc["retry_ms"] = e.retry_ms
            return self._reply(e.status, doc)
        missing = [{"index": i, "id": given[i], "reason": why} for i, why in sorted(result.missing.items())]
        ms = round((time.perf_counter() - t0) * 1000, 3)
        self._reply(200, {"scores": result.scores, "missing": missing, "step": self.server.step, "ms": ms})

    def do_GET(self) -> None:
        if self._foreign():
            return None
        if self.path.split("?")[0] != "/health":
            return self._reply(404, {"error": f"no such endpoint {self.path[:80]!r}: POST /score, GET /health"})
        w = self.server.worker
        followers = {f: w.down.get(f, "up") for f in w.followers}
        status = "ok" if not w.down and w.failed is None else "degraded" if w.failed is None else "stopped"
        scorer = "running" if w.failed is None else f"stopped: {type(w.failed).__name__}: {w.failed}"
        doc = {"status": status, "scorer": scorer, "followers": followers, "step": self.server.step}
        self._reply(200, {**doc, "batches": w.batches, "rows": w.rows})

    def _reply(self, status: int, doc: dict) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass  # one line per request would cost more than the scoring; /health reports the counts
