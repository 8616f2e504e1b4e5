"""Sample ids as the parties write them (integers or strings) -> the int64 ids that shards, splits and PSI use.

An id that reads as a decimal integer in int64 range ("42", "-7", "007") is that integer; any other
text (an e-mail, a device id, "42.0") is the first 8 bytes of SHA-256("vfl-id/v1\\0" + UTF-8 text)
read as a little-endian int64. The mapping is per value and party-independent, so two parties that
hold the same id text hold the same int64 id. Distinct texts that meet in int64 (probability about
n^2 / 2^65 for n ids) are refused as duplicates, never merged silently.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from vfl.data.errors import DataError

_INT = re.compile(r"^[+-]?[0-9]+$")
ID_DOMAIN = b"vfl-id/v1\0"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def id64_of_text(text: str) -> int:
    """The int64 id of one id text (see the module docstring)."""
    text = text.strip()
    if not text:
        raise DataError("an id is empty")
    if _INT.match(text):
        value = int(text)
        if INT64_MIN <= value <= INT64_MAX:
            return value
    return int.from_bytes(hashlib.sha256(ID_DOMAIN + text.encode("utf-8")).digest()[:8], "little", signed=True)


def ids64(texts) -> np.ndarray:
    """int64 ids of a sequence of id texts (integers parsed fast; strings hashed one by one)."""
    arr = np.asarray(texts, dtype=object)
    out = np.empty(arr.size, np.int64)
    for i, t in enumerate(arr):
        out[i] = id64_of_text(str(t))
    return out


def check_unique(ids: np.ndarray, where: str, texts_of=None) -> None:
    """Refuse duplicate ids with a message naming the first one (texts_of(id64) -> its texts, if known)."""
    if ids.size < 2:
        return
    s = np.sort(ids)
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        first = int(s[dup[0]])
        named = texts_of(first) if texts_of is not None else None
        shown = f"{named}" if named else f"{first}"
        raise DataError(
            f"{where}: sample id {shown} appears more than once ({dup.size} duplicate(s) in all); "
            f"each id must name one row (de-duplicate the file)"
        )
