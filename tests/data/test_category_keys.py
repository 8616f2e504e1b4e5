"""The key schemes of categorical values (vfl/data/readers/category_keys.py), and the Criteo preset as a schema: a
Criteo party file prepared by `prepare --party` is the shard that `prepare --config` gives under the same declared
schema (`keys: hex`), byte for byte: one prepare path."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import yaml

from vfl.data.__main__ import main as data_main
from vfl.data.readers.category_keys import arrow_keys, keys_of

EDGE = ["68fd1e64", "ABCDEF01", "00000000", "0000000", "xyz", "", "  ", " 68fd1e64 ", "café", "68fd1e6g"]


def _crc(text: str) -> int:
    return 2**32 + zlib.crc32(text.encode())


def test_the_hex_scheme_keys_hex_values_by_their_number_other_text_by_crc_and_only_empty_as_missing():
    # Execute
    keys, missing = keys_of(np.array([t.strip() for t in EDGE], dtype=object), "hex")
    # Assert
    want = [0x68FD1E64, 0xABCDEF01, 0, _crc("0000000"), _crc("xyz"), 0, 0, 0x68FD1E64, _crc("café"), _crc("68fd1e6g")]
    assert keys.tolist() == want
    assert missing.tolist() == [False, False, False, False, False, True, True, False, False, False]


@pytest.mark.parametrize("scheme", ["text", "hex"])
def test_each_scheme_keys_an_arrow_column_as_its_stripped_text(scheme):
    import pyarrow as pa

    # Execute: the fast reader's keys (raw column) and the text path's (stripped values)
    fast = arrow_keys(pa.array(EDGE * 3, pa.string()), scheme)
    text = keys_of(np.array([t.strip() for t in EDGE * 3], dtype=object), scheme)
    # Assert
    assert np.array_equal(fast[0], text[0]) and np.array_equal(fast[1], text[1])


def test_an_unknown_scheme_is_refused_naming_the_domain():
    with pytest.raises(ValueError, match=r"key scheme must be one of \['text', 'hex'\], got 'hexa'"):
        keys_of(np.array(["a"], dtype=object), "hexa")


def _criteo_party_file(path) -> str:
    lines = ["id\tlabel\tI1\tC1"]
    for r in range(400):
        c1 = "" if r % 11 == 0 else ("odd" if r % 13 == 0 else f"{r * 2654435761 % 2**32 % 40:08x}")
        lines.append(f"{r}\t{r * 7 % 3 % 2}\t{'' if r % 9 == 0 else r % 17}\t{c1}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("mode", ["hash", "vocabulary"])
def test_a_criteo_party_file_prepared_by_party_or_by_its_declared_schema_gives_one_shard(tmp_path, mode):
    # Prepare: the file, and a leader config declaring the Criteo preset's schema of its columns
    src = _criteo_party_file(tmp_path / "leader.tsv")
    transform = {"hash": {"buckets": 50}} if mode == "hash" else {"vocabulary": {"min_count": 2}}
    config = {
        "role": "leader",
        "party": "leader",
        "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["follower0"]},
        "data": {
            "path": "unused",
            "schema": {
                "id": "id",
                "keys": "hex",
                "columns": {
                    "I1": {"kind": "numeric", "transform": "log1p"},
                    "C1": {"kind": "categorical", "transform": transform},
                },
                "label": {"column": "label", "classes": ["0", "1"]},
            },
        },
    }
    (tmp_path / "leader.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # the columns in file order
    size = ["--hash-buckets", "50"] if mode == "hash" else ["--vocab-min-count", "2"]
    # Execute
    by_party = data_main(
        ["prepare", "--party", "leader", "--input", src, "--out", str(tmp_path / "party"), "--dense", "I1"]
        + ["--categorical", "C1", "--label", *size]
    )
    by_config = data_main(
        ["prepare", "--config", str(tmp_path / "leader.yaml"), "--input", src, "--out", str(tmp_path / "config")]
    )
    # Assert: the same arrays and the same saved schema (the manifests differ only in how they describe it)
    assert by_party == by_config == 0
    a, b = tmp_path / "party" / "leader", tmp_path / "config" / "leader"
    files = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs)
    assert files == sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs)
    for name in files:
        if name != "manifest.json":
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert yaml.safe_load((a / "schema.json").read_text())["keys"] == "hex"
