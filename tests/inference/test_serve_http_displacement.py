"""Which connection a newcomer displaces, and when a request has arrived whole, on the endpoint's client table in
memory: socket pairs stand for connections and each one's clock is set by hand (the live attacks over tcp are in
test_serve_http_clients.py)."""

from __future__ import annotations

import socket
import time

import pytest

from vfl.inference.serve.http_clients import ClientLimits, ClientTable
from vfl.inference.serve.request_arrival import declared_length

REQUEST = b'POST /score HTTP/1.1\r\nContent-Length: 12\r\n\r\n{"ids": [1]}'


@pytest.fixture
def pairs():
    """pairs(n): n connected socket pairs (the endpoint's end, the client's end), all closed after the test."""
    made = []

    def make(n: int) -> list[tuple[socket.socket, socket.socket]]:
        made.extend(socket.socketpair() for _ in range(n))
        return made[-n:]

    yield make
    for ours, theirs in made:
        ours.close()
        theirs.close()


def _table(slots: int) -> ClientTable:
    """Slots for one address, a read deadline far beyond the test."""
    return ClientTable(ClientLimits(max_connections=slots, max_per_address=slots, read_timeout_s=30.0))


def test_a_newcomer_takes_an_old_tricklers_slot_not_a_fresh_connection_whose_request_is_unread_or_not_yet_sent(pairs):
    # Prepare: one address, 3 slots: a trickler 2 s old with 20 bytes read; a connection 0.1 s old whose 300 request
    # bytes wait unread in its socket (its handler has not run); a connection 0.05 s old that has sent nothing yet
    table, conns = _table(3), pairs(5)
    trickler, unread, empty = (table.admit(ours, "10.0.0.1") for ours, _ in conns[:3])
    now = time.monotonic()
    trickler.since, trickler.received = now - 2.0, 20
    unread.since, empty.since = now - 0.1, now - 0.05
    conns[1][1].sendall(b"x" * 300)
    # Execute: a fourth connection from the address, then a fifth once the fresh ones are past FRESH_S
    table.admit(conns[3][0], "10.0.0.1")
    first = {c.sock for c in (trickler, unread, empty)} - set(table._clients)
    unread.since = empty.since = now - 5.0
    table.admit(conns[4][0], "10.0.0.1")
    second = {c.sock for c in (unread, empty)} - set(table._clients)
    # Assert: the old trickler went first; past the fresh window the one that sent nothing went, not the one whose
    # bytes wait unread (300 B in 5 s against 0)
    assert first == {trickler.sock} and second == {empty.sock}
    assert table.stats()["displaced"] == 2


def test_a_request_that_arrived_whole_keeps_its_slot_while_its_handler_waits_for_a_loaded_machine(pairs):
    # Prepare: one address, 3 slots: an honest connection 1 s old (past its fresh window) whose whole request waits in
    # its socket, its handler not yet run; another 1 s old whose handler read the request line only, the rest waiting;
    # an attacker's reconnect 0.1 s old (fresh) that sent 31 header bytes
    table, conns = _table(3), pairs(5)
    unread, half_read, trickler = (table.admit(ours, "10.0.0.3") for ours, _ in conns[:3])
    now = time.monotonic()
    unread.since = half_read.since = now - 1.0
    trickler.since = now - 0.1
    conns[0][1].sendall(REQUEST)
    conns[1][1].sendall(REQUEST)
    table.receive(half_read, bytearray(22), 22)  # "POST /score HTTP/1.1\r\n"
    conns[2][1].sendall(b"POST /score HTTP/1.1\r\nX-Slow: a")
    # Execute: two more reconnects from the address
    table.admit(conns[3][0], "10.0.0.3")
    table.admit(conns[4][0], "10.0.0.3")
    # Assert: each took a slot whose request had not arrived (the trickler's, then the first reconnect's, which
    # sent nothing); the requests that arrived whole hold theirs though they are the oldest and past their window
    assert set(table._clients) == {unread.sock, half_read.sock, conns[4][0]}
    assert table.stats()["displaced"] == 2


def test_bodies_trickled_on_pace_on_every_slot_give_way_to_a_newcomer_slowest_first(pairs):
    # Prepare: one address, 2 slots, both bodies past their grace and on pace (20 and 40 KiB/s against the 16 KiB/s
    # minimum): an attacker's trickles that would otherwise hold every slot until their read deadline
    table, conns = _table(2), pairs(3)
    slow, fast = (table.admit(ours, "10.0.0.2") for ours, _ in conns[:2])
    now = time.monotonic()
    for client, rate in ((slow, 20 << 10), (fast, 40 << 10)):
        client.since = client.head_at = now - 2.0
        client.head_bytes, client.received = 100, 100 + 2 * rate
        client.arrival.parsed(1 << 20)  # a 1 MiB body, far from arrived
    # Execute: a newcomer on the address
    newcomer = table.admit(conns[2][0], "10.0.0.2")
    # Assert: it took the slower body's slot (it was refused 503 when bodies on pace were never displaced)
    assert newcomer is not None and set(table._clients) == {fast.sock, conns[2][0]}
    assert table.stats()["displaced"] == 1 and table.stats()["refused"] == 0


@pytest.mark.parametrize("sent", [REQUEST, REQUEST[:-1]], ids=["whole", "one_byte_short"])
def test_a_request_counts_as_arrived_only_with_its_blank_line_and_its_whole_declared_body_wherever_the_handler_stopped(
    sent, pairs
):
    # Prepare: the request cut at every byte between what its handler read and what waits in the socket
    for cut in range(len(sent) + 1):
        table, [(ours, theirs)] = _table(4), pairs(1)
        client = table.admit(ours, "10.0.0.1")
        theirs.sendall(sent)
        if cut:
            table.receive(client, bytearray(cut), cut)
        # Execute / Assert: arrived only when whole, wherever the cut
        assert client.request_arrived() == (sent == REQUEST), cut


def test_once_the_handler_has_read_the_headers_its_own_content_length_decides_arrival(pairs):
    # Prepare: a whole request read by its handler, which read a Content-Length 5 bytes more than the head says
    table, [(ours, theirs)] = _table(4), pairs(1)
    client = table.admit(ours, "10.0.0.1")
    theirs.sendall(REQUEST)
    table.receive(client, bytearray(len(REQUEST)), len(REQUEST))
    # Execute
    table.headers_read(client, 17)
    before = client.request_arrived()
    theirs.sendall(b"12345")
    # Assert: arrived only with the 5 bytes more
    assert not before and client.request_arrived()


@pytest.mark.parametrize(
    "head, length",
    [
        (b"GET /health HTTP/1.1\r\nHost: a", 0),
        (b"POST /score HTTP/1.1\r\nCONTENT-LENGTH:  7 ", 7),
        (b"POST /score HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 9", 3),
        (b"POST /score HTTP/1.1\r\nContent-Length: -3", None),
        (b"POST /score HTTP/1.1\r\nContent-Length: 1e3", None),
        (b"POST /score HTTP/1.1\r\nContent-Length: 9999999999999", None),
    ],
)
def test_the_declared_body_length_is_the_first_content_length_a_decimal_of_at_most_12_digits(head, length):
    # Prepare / Execute / Assert
    assert declared_length(head) == length
