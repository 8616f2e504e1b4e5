"""Loopback TCP tools for the attack tests: a recording forwarder, a replaying server, a stranger's frames."""

from __future__ import annotations

import socket
import threading
import time


class Forwarder:
    """Listens on 127.0.0.1:port and pipes every connection to 127.0.0.1:target, recording both directions.

    While nothing listens on the target, an accepted connection is closed at once (a proxy whose
    back end is down). `chunks` holds (connection number, "up" | "down", bytes): up = client to target.
    """

    def __init__(self, port: int, target: int):
        self.target = target
        self.chunks: list[tuple[int, str, bytes]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                n = self.connections
                self.connections += 1
                self._open += [client, upstream]
            for a, b, d in ((client, upstream, "up"), (upstream, client, "down")):
                threading.Thread(target=self._pump, args=(n, a, b, d), daemon=True).start()

    def _pump(self, n: int, src: socket.socket, dst: socket.socket, direction: str) -> None:
        src.settimeout(None)
        try:
            while data := src.recv(1 << 16):
                with self._lock:
                    self.chunks.append((n, direction, data))
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stream(self, direction: str, connection: int | None = None) -> bytes:
        """All bytes recorded in one direction (of one connection, or of all)."""
        with self._lock:
            return b"".join(d for n, dr, d in self.chunks if dr == direction and connection in (None, n))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()
        with self._lock:
            for s in self._open:
                s.close()


def replay_server(
    port: int, data: bytes, hold_s: float = 30.0, play: threading.Event | None = None
) -> threading.Thread:
    """Serve one connection on 127.0.0.1:port with `data` (a recorded stream), then hold it open. play: once the
    connection is accepted, `data` is sent only when this event is set (within hold_s)."""
    server = socket.create_server(("127.0.0.1", port))

    def run():
        server.settimeout(hold_s)
        try:
            conn, _ = server.accept()
        except OSError:
            server.close()
            return
        try:
            if play is not None:
                play.wait(hold_s)
            conn.sendall(data)
            conn.settimeout(hold_s)
            while conn.recv(1 << 16):
                pass
        except OSError:
            pass
        conn.close()
        server.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def replay_to(port: int, data: bytes, wait_s: float = 5.0) -> float | None:
    """Send a recorded client stream to 127.0.0.1:port; seconds until the server closed it (None: still open)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        try:
            s.sendall(data)
            while s.recv(1 << 16):
                pass
        except (TimeoutError, OSError) as e:
            if isinstance(e, TimeoutError):
                return None
        return time.monotonic() - t0


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def null_greeting() -> bytes:
    """A ZMTP 3.0 greeting offering the NULL mechanism (what an unauthenticated ZeroMQ peer sends)."""
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def curve_greeting() -> bytes:
    """A ZMTP 3.0 greeting offering the CURVE mechanism as a client: what a stranger sends before its handshake."""
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def command_header(size: int) -> bytes:
    """The header of a ZMTP command frame claiming `size` bytes (long form)."""
    return b"\x06" + size.to_bytes(8, "big")


class PeakRSS:
    """Samples a process's resident set size every few milliseconds in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int, every_s: float = 0.005):
        self.pid, self.every_s = pid, every_s
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return
            time.sleep(self.every_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak
