"""Append rows to a .npy file whose length is unknown until the end (memory stays constant)."""

from __future__ import annotations

import os

import numpy as np

_HEADER_BYTES = 128  # fits shapes up to ~10**20 rows; checked at close


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    text = repr(d).encode("latin1")
    pad = _HEADER_BYTES - 10 - len(text) - 1
    if pad < 0:
        raise ValueError(f"npy header for shape {shape} does not fit in {_HEADER_BYTES} bytes")
    text = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


class NpyAppender:
    """Writes a C-order .npy of rows with a fixed trailing shape, appending chunk by chunk."""

    def __init__(self, path: str | os.PathLike, dtype, row_shape: tuple[int, ...] = ()):
        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.rows = 0
        self._f = open(self.path, "wb")
        self._f.write(b"\0" * _HEADER_BYTES)

    def append(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: row shape {chunk.shape[1:]} != {self.row_shape}")
        self._f.write(chunk.tobytes())
        self.rows += chunk.shape[0]

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.seek(0)
        self._f.write(_header(self.dtype, (self.rows, *self.row_shape)))
        self._f.close()
