"""The leader's local HTTP JSON endpoint for online scoring (Python's http.server, 127.0.0.1 by default).

    POST /score  {"ids": [17, "cust-000042", ...], "deadline_ms": 200}   (Content-Type: application/json)
      200 {"scores": [0.12, null, ...], "missing": [{"index": 1, "id": "cust-000042", "reason": "unknown to shop"}],
           "step": 1600, "ms": 1.9}
      (a missing id is echoed when its JSON text is at most MAX_ECHOED_ID_CHARS long, else only its index: an
      answer's size is bounded by the number of ids, never by what a client chose to send)
      400 bad request, 411/413 no or too large a Content-Length, 413 too many ids, 415 not JSON, 429 a follower's
      rate limit (retry_ms), 503 a follower is down, 504 the deadline passed; every error is {"error": "<one line>"};
      429 and a 503 worth retrying (a follower down, restarting, or the queue full) carry retry_ms and the header
      `Retry-After` (whole seconds, RFC 9110 Sec. 10.2.3).
    A request whose Host (or Origin) is not the endpoint's own address or a loopback name gets 403: a web page that
    the leader's browser opens can neither post a form to it (text/plain is refused; application/json from another
    origin needs a CORS preflight, which this endpoint does not answer) nor reach it under a rebound DNS name.
    GET /health  {"status": "ok" | "degraded" | "stopped", "scorer": "running", "followers": {"shop": "up"},
                  "step": 1600, "batches": .., "rows": .., "clients": {"connections": .., "refused": .., ...}}

Clients are bounded as http_clients.py says (connections in all and per address, a whole-request read deadline);
a body is refused on its declared length, then on its shape (counted on the raw bytes), before any JSON is parsed.

An id is what the party files' id column holds: an integer, or any text (hashed as vfl/data/ids.py does). A score is
a probability (binary), K class probabilities (multiclass) or the value in the label's units (regression).

Why the standard library: the endpoint is local to the leader (a serving stack, or a process beside it, calls it),
requests are small JSON documents, and the scoring itself runs in one worker thread that owns the ZeroMQ socket
(leader.py), so an HTTP framework's event loop would buy no throughput; `ThreadingHTTPServer` with HTTP/1.1
keep-alive (one thread per client connection) needs no dependency and no code of ours for the protocol.
"""

from __future__ import annotations

import io
import json
import re
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from vfl.inference.serve.http_clients import ClientCut, ClientLimits, ClientTable, DeadlineReader, raw_answer, send_once
from vfl.inference.serve.leader import ServeError

MAX_BODY_BYTES = 1 << 20
BODY_BYTES_PER_ID = 256  # a body may hold this many bytes per id of max_rows (and 1 KiB more), 1 MiB at most
MAX_DEADLINE_MS = 60_000
MAX_ECHOED_ID_CHARS = 64  # a longer missing id is named by its index alone
_INT64 = (-(2**63), 2**63 - 1)
# A JSON string, or an unterminated one up to the end: it never fails once begun, so a scan is linear in the body.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)


def body_limit(max_rows: int) -> int:
    """The most bytes a /score body of at most `max_rows` ids may declare."""
    return min(MAX_BODY_BYTES, 1024 + BODY_BYTES_PER_ID * max_rows)


def check_shape(body: bytes, max_rows: int) -> None:
    """Refuse, on the raw bytes and before any JSON object is built, a body whose arrays, objects or commas outside
    strings are more than one, one and `max_rows` (so more than max_rows ids, or nested ones), or that holds more
    than max_rows + 2 strings: ServeError(400 or 413). What passes parses into at most one dict, one list and
    max_rows + 2 strings and numbers. The characters are counted on the whole body first; only where that is over
    the bounds are those inside strings (a JSON string scan, stopped after max_rows + 3 strings) taken off.
    UTF-8 only (RFC 8259; no NUL byte): in UTF-16 or -32, which json.loads would also read, a byte that looks like a
    quote could hide a bracket from the scan."""
    if b"\x00" in body:
        raise ServeError(400, "the body is not UTF-8 JSON (it holds a NUL byte)")
    arrays, objects, commas = body.count(b"["), body.count(b"{"), body.count(b",")
    if arrays > 1 or objects > 1 or commas > max_rows:
        for n, string in enumerate(_JSON_STRING.finditer(body), 1):
            if n > max_rows + 2:
                raise ServeError(
                    413,
                    f"more than {max_rows + 2} strings in one request: at most {max_rows} ids (--max-rows) and "
                    "the keys ids, deadline_ms",
                )
            start, end = string.span()
            arrays -= body.count(b"[", start, end)
            objects -= body.count(b"{", start, end)
            commas -= body.count(b",", start, end)
    if arrays > 1 or objects > 1:
        raise ServeError(
            400,
            f"ids must be a flat list of integers or strings in one object, got {arrays} arrays and {objects} objects "
            "in the body (at most 1 of each)",
        )
    if commas > max_rows:
        raise ServeError(413, f"more than {max_rows} ids in one request; at most {max_rows} (--max-rows)")


def parse_request(body: bytes, max_rows: int, default_deadline_ms: int) -> tuple[list, np.ndarray, int]:
    """(the ids as given, their int64 ids, deadline_ms) of a /score body; ServeError(400 or 413) naming the problem."""
    from vfl.data.ids import ids64

    check_shape(body, max_rows)
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ServeError(400, f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict) or "ids" not in doc:
        raise ServeError(400, 'the body must be a JSON object {"ids": [...], "deadline_ms": N}')
    unknown = sorted(set(doc) - {"ids", "deadline_ms"})
    if unknown:
        raise ServeError(400, f"unknown key {repr(unknown[0])[:80]}; allowed: ids, deadline_ms")
    given = doc["ids"]
    if not isinstance(given, list) or not given:
        raise ServeError(400, f"ids must be a non-empty list of integers or strings, got {str(given)[:80]}")
    if len(given) > max_rows:
        raise ServeError(413, f"{len(given)} ids in one request; at most {max_rows} (--max-rows)")
    deadline = doc.get("deadline_ms", default_deadline_ms)
    if isinstance(deadline, bool) or not isinstance(deadline, int) or not 1 <= deadline <= MAX_DEADLINE_MS:
        raise ServeError(400, f"deadline_ms must be an integer in [1, {MAX_DEADLINE_MS}], got {repr(deadline)[:80]}")
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
    """The HTTP server; its handler reads `worker`, `max_rows`, `deadline_ms`, `step`, `log` and `clients` here."""

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
        limits: ClientLimits = ClientLimits(),
    ):
        self.worker, self.max_rows, self.deadline_ms, self.step = worker, max_rows, deadline_ms, step
        self.log, self.max_body, self.clients = log, body_limit(max_rows), ClientTable(limits)
        self.disconnects = 0
        self._busy = raw_answer(
            503,
            "Service Unavailable",
            f"too many client connections (at most {limits.max_connections}, {limits.max_per_address} from one "
            "address), each with a request in progress; retry later",
        )
        super().__init__(address, ScoreHandler)
        self.hosts = endpoint_names(address[0], self.server_address[1])

    def process_request(self, request, client_address) -> None:
        """Serve the connection in a thread of its own if the client table admits it (it may displace a reading
        connection), else answer 503 and close it."""
        if self.clients.admit(request, client_address[0]) is None:
            send_once(request, self._busy)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        """Free the connection's slot, then close it (in this order: a displacing newcomer shuts down only a socket
        that is still open)."""
        self.clients.release(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """One line in the leader's log (a client that went away is only counted), never a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, ClientCut):
            pass  # counted in self.clients, answered 408 or 431 if the client was reading
        elif isinstance(error, ConnectionError):
            self.disconnects += 1
        elif self.log is not None:
            self.log.warning(f"leader: HTTP client {client_address[0]}: {type(error).__name__}: {error}")


def _missing(index: int, given, why: str) -> dict:
    """A missing id's entry: its index and why, and the id as given when its JSON text is short enough to echo."""
    entry = {"index": index}
    if len(json.dumps(given)) <= MAX_ECHOED_ID_CHARS:
        entry["id"] = given
    entry["reason"] = why
    return entry


class ScoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client's connection (and its thread) serves many requests
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK would add 40 ms
    server: ScoreHTTPServer

    def setup(self) -> None:
        """Reads bounded by the request's deadline and byte budget (DeadlineReader); an answer is written by
        ClientTable.write_answer (displaceable while the client does not take it, closed past the same number of
        seconds); the socket's own timeout bounds what the standard library writes itself (its error answers)."""
        self.client = self.server.clients.client_of(self.request)
        self.timeout = self.server.clients.limits.read_timeout_s
        super().setup()
        if self.client is not None:
            self.rfile.close()
            self.rfile = io.BufferedReader(DeadlineReader(self.server.clients, self.client))

    def handle(self) -> None:
        if self.client is not None:  # else displaced before its thread started
            super().handle()

    def handle_one_request(self) -> None:
        super().handle_one_request()
        self.server.clients.answered(self.client)

    def _work(self) -> bool:
        """The request has arrived whole: from now on the connection is not displaced. False: it was, already."""
        if self.server.clients.working(self.client):
            return True
        self.close_connection = True
        return False

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
        declared = self.headers.get("Content-Length") or ""
        try:
            length = int(declared or -1)
        except ValueError:
            length = -1
        limit = self.server.max_body
        if not 0 <= length <= limit:  # refused on what it declares, before a byte of the body is read
            self.close_connection = True
            why = f"({BODY_BYTES_PER_ID} bytes per id of --max-rows {self.server.max_rows}, 1 KiB more, 1 MiB at most)"
            return self._reply(
                413 if length > limit else 411,
                {"error": f"Content-Length must be in [0, {limit}] {why}, got {declared[:40]!r}"},
            )
        self.client.budget += length
        self.server.clients.headers_read(self.client, length)
        body = self.rfile.read(length)
        if len(body) < length or not self._work():  # the client went away, or was displaced, mid-body
            self.close_connection = True
            return None
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
            return self._reply(e.status, doc, None if e.retry_ms is None else max(1, -(-e.retry_ms // 1000)))
        missing = [_missing(i, given[i], why) for i, why in sorted(result.missing.items())]
        ms = round((time.perf_counter() - t0) * 1000, 3)
        self._reply(200, {"scores": result.scores, "missing": missing, "step": self.server.step, "ms": ms})

    def do_GET(self) -> None:
        if self._foreign() or not self._work():
            return None
        if self.path.split("?")[0] != "/health":
            return self._reply(404, {"error": f"no such endpoint {self.path[:80]!r}: POST /score, GET /health"})
        w = self.server.worker
        followers = {f: w.down.get(f, "up") for f in w.followers}
        status = "ok" if not w.down and w.failed is None else "degraded" if w.failed is None else "stopped"
        scorer = "running" if w.failed is None else f"stopped: {type(w.failed).__name__}: {w.failed}"
        doc = {"status": status, "scorer": scorer, "followers": followers, "step": self.server.step}
        self._reply(200, {**doc, "batches": w.batches, "rows": w.rows, "clients": self.server.clients.stats()})

    def _reply(self, status: int, doc: dict, retry_after_s: int | None = None) -> None:
        """The answer, headers and body in one write that the client must take within the read deadline (while it
        does not, its connection is displaceable: ClientTable.write_answer)."""
        data = json.dumps(doc).encode()
        self.send_response(status)
        if retry_after_s is not None:
            self.send_header("Retry-After", str(retry_after_s))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n")  # what end_headers() would write, kept for one write with the body
        head, self._headers_buffer = b"".join(self._headers_buffer), []
        self.server.clients.write_answer(self.client, head + data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own error answers (a request line or headers it cannot parse, an unknown method, a
        line too long) as a short JSON answer that closes the connection and echoes nothing of the request (`message`
        and `explain` hold the client's bytes), written like every other answer: while the client does not take it,
        the connection is displaceable. (The standard library's page echoes the request line, html-escaped, into a
        blocking send, during which the slot would count its request as arrived.)"""
        self.close_connection = True
        reason, meaning = self.responses.get(code, ("Error", "the request could not be read"))
        self.server.clients.write_answer(self.client, raw_answer(code, reason, f"{reason}: {meaning}"))

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass  # one line per request would cost more than the scoring; /health reports the counts
