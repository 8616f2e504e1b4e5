"""What a connected socket holds: bytes delivered but not yet read, bytes sent but not yet acknowledged.

The leader's HTTP endpoint looks at these from its accept thread, while another thread may be reading or writing the
same socket: each call is one non-blocking system call that never consumes a byte (FIONREAD, SIOCOUTQ, and recv with
MSG_PEEK | MSG_DONTWAIT through libc, since the socket object's own recv would first wait out its timeout when the
other thread has just read what was waiting). A closed or unsupported socket reads as empty.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
import termios

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_LIBC.recv.restype = ctypes.c_ssize_t


def unread_bytes(sock: socket.socket) -> int:
    """Bytes the peer has delivered that this end has not read yet (FIONREAD; 0 where unsupported)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except (OSError, ValueError):
        return 0


def unsent_bytes(sock: socket.socket) -> int:
    """Bytes of the socket's send queue its peer has not acknowledged (Linux SIOCOUTQ; 0 where unsupported)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, ValueError):
        return 0


def waiting_bytes(sock: socket.socket, most: int) -> bytes:
    """The first `most` (at most) of the bytes delivered and not yet read, left in the socket."""
    n = min(unread_bytes(sock), most)
    if n <= 0:
        return b""
    buffer = ctypes.create_string_buffer(n)
    got = _LIBC.recv(sock.fileno(), buffer, n, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    return buffer.raw[: max(got, 0)]
