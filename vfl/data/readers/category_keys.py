"""How a categorical value's text becomes a 64-bit key: the key schemes a table's schema declares (`data.schema.keys`).

| scheme | key of a value (stripped) | missing |
|---|---|---|
| text (default) | pandas.util.hash_array(text, encoding='utf8', hash_key=KEY_HASH, categorize=True) as uint64; 1 where that gives 0 | empty, NA, N/A, NaN, nan, null, NULL, None |
| hex (Criteo's) | 8 hex digits: their value (int(text, 16)); any other text: 2**32 + zlib.crc32(its UTF-8 bytes) | empty |

A key is computed once per distinct value of a block; the transforms (vfl/data/table.py) hash a key into an id or
look it up in a vocabulary. The hex scheme keeps a Criteo value's own number, so its shard equals the one the raw
Criteo tokenizer (readers/tokenizer.py) would give; the ONNX export (vfl/inference/export/onnx_transforms.py) names
the scheme so a serving client keys its values the same way.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from vfl.config.table_schema import KEY_SCHEMES

NA_TOKENS = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")
KEY_HASH = b"vfl-categories01"  # pandas' siphash-2-4 key (16 bytes) for categorical text -> uint64
NON_HEX_KEY_BASE = 1 << 32  # a non-hex value's key: above every 8-hex-digit value
_HEX8 = re.compile(r"^[0-9a-fA-F]{8}$")


def text_keys(text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 keys and missing flags of a categorical column's text values under the text scheme."""
    import pandas as pd

    values = np.asarray(text, dtype=object)
    missing = pd.Series(values).isin(NA_TOKENS).to_numpy()
    keys = pd.util.hash_array(values, encoding="utf8", hash_key=KEY_HASH.decode(), categorize=True)
    keys = keys.astype(np.uint64)
    keys[missing] = 0
    keys[(keys == 0) & ~missing] = 1  # 0 means missing
    return keys, missing


def hex_key(text: str) -> int:
    """The hex scheme's key of one present (non-empty) value."""
    if _HEX8.match(text):
        return int(text, 16)
    return NON_HEX_KEY_BASE + zlib.crc32(text.encode("utf-8", "surrogateescape"))


def hex_keys(text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 keys and missing flags of a categorical column's text values under the hex scheme (each distinct value
    stripped here, so raw values may be given)."""
    uniq, inv = np.unique(np.asarray(text, dtype=object).astype(str), return_inverse=True)
    uniq = [t.strip() for t in uniq]
    miss = np.array([t == "" for t in uniq], bool)
    keys = np.array([0 if m else hex_key(t) for t, m in zip(uniq, miss)], dtype=np.uint64)
    return keys[inv], miss[inv]


def keys_of(text: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """uint64 keys and missing flags of stripped text values under `scheme` (one of KEY_SCHEMES)."""
    if scheme == "hex":
        return hex_keys(text)
    if scheme == "text":
        return text_keys(text)
    raise ValueError(f"key scheme must be one of {list(KEY_SCHEMES)}, got {scheme!r}")


def arrow_keys(arr, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """keys_of a raw (unstripped) arrow text column, each distinct value keyed once; the hex scheme's 8-hex-digit
    values vectorized (one with a space around it is not 8 hex digits: it is stripped and keyed on its own)."""
    from vfl.data.readers import arrow_text

    if scheme != "hex":
        values, idx = arrow_text.distinct(arr, stripped=True)
        keys, miss = keys_of(values, scheme)
        return keys[idx], miss[idx]
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    ok, keys = arrow_text.hex8(enc.dictionary)
    miss = np.zeros(keys.size, bool)
    if not ok.all():
        values = enc.dictionary.to_pylist()
        for i in np.flatnonzero(~ok):
            text = values[i].strip()  # as the text path strips every value
            if text == "":
                miss[i] = True
            else:
                keys[i] = hex_key(text)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    return keys[idx], miss[idx]
