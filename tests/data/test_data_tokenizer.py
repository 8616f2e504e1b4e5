"""The raw Criteo tokenizer parses every quirk of the real format and names malformed lines."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tests.support.criteo_lines import raw_line
from vfl.data.readers.tokenizer import parse_block


def _parse(lines, has_id=False):
    return parse_block("".join(x + "\n" for x in lines).encode(), 0, has_id)


def test_real_sample_matches_pandas_field_by_field(real_1k):
    # Prepare
    df = pd.read_csv(real_1k, sep="\t", header=None)
    # Execute
    block, bad = parse_block(real_1k.read_bytes(), 0, False)
    # Assert
    assert bad == []
    assert block.label.size == 1000
    np.testing.assert_array_equal(block.label, df[0].to_numpy())
    np.testing.assert_array_equal(block.dense, df.iloc[:, 1:14].fillna(0).astype(np.int64).to_numpy())
    np.testing.assert_array_equal(block.dense_missing, df.iloc[:, 1:14].isna().to_numpy())
    keys = df.iloc[:, 14:].fillna("0").map(lambda s: int(s, 16)).to_numpy().astype(np.uint64)
    np.testing.assert_array_equal(block.cat_key, keys)
    np.testing.assert_array_equal(block.cat_missing, df.iloc[:, 14:].isna().to_numpy())


def test_real_sample_has_the_quirks_the_reader_must_survive(real_1k):
    # Prepare / Execute
    block, _ = parse_block(real_1k.read_bytes(), 0, False)
    # Assert: negative I2, I12 mostly missing, C22 mostly missing, trailing empty fields
    assert block.dense[:, 1].min() < 0
    assert 0.7 < block.dense_missing[:, 11].mean() < 0.85
    assert 0.75 < block.cat_missing[:, 21].mean() < 0.9
    assert block.cat_missing[:, 25].any()


def test_negative_long_and_missing_integers_parse_exactly():
    # Prepare
    ints = ["-1", "", "123456789012", "0", "-42", "7", "99999999", "100000000", "", "", "", "", "3"]
    # Execute
    block, bad = _parse([raw_line(ints=ints)])
    # Assert
    assert bad == []
    assert block.dense[0].tolist() == [-1, 0, 123456789012, 0, -42, 7, 99999999, 100000000, 0, 0, 0, 0, 3]
    assert block.dense_missing[0].tolist() == [x == "" for x in ints]


def test_trailing_empty_fields_are_missing_values_not_a_short_line():
    # Prepare
    cats = ["68fd1e64"] * 22 + ["", "", "", ""]
    # Execute
    block, bad = _parse([raw_line(cats=cats)])
    # Assert
    assert bad == []
    assert block.cat_missing[0, -4:].all() and not block.cat_missing[0, :22].any()


def test_non_hex_and_uppercase_categoricals_get_distinct_stable_keys():
    # Prepare
    cats = ["ABCDEF01", "abcdef01", "hello", "hello", "x"] + ["68fd1e64"] * 21
    # Execute
    block, bad = _parse([raw_line(cats=cats)])
    # Assert
    k = block.cat_key[0]
    assert bad == []
    assert k[0] == k[1] == 0xABCDEF01
    assert k[2] == k[3] and k[2] >= 1 << 32 and k[4] != k[2]


def test_malformed_lines_are_named_and_the_good_ones_kept():
    # Prepare
    lines = [
        raw_line(),
        "\t".join(raw_line().split("\t")[:39]),  # 39 fields
        raw_line() + "\textra",  # 41 fields
        raw_line(ints=["1", "x2"] + ["1"] * 11),  # non-integer in I2
        raw_line(label="2"),
        raw_line(ints=["-"] + ["1"] * 12),
        raw_line(label="1"),
    ]
    # Execute
    block, bad = _parse(lines)
    # Assert
    assert block.line_index.tolist() == [0, 6]
    assert [b.line_index for b in bad] == [1, 2, 3, 4, 5]
    assert "got 39" in bad[0].reason and "got 41" in bad[1].reason
    assert "I2" in bad[2].reason and "label" in bad[3].reason and "I1" in bad[4].reason


def test_crlf_line_endings_and_blank_lines_are_tolerated():
    # Prepare
    data = (raw_line() + "\r\n\n" + raw_line(label="1") + "\r\n").encode()
    # Execute
    block, bad = parse_block(data, 0, False)
    # Assert
    assert bad == []
    assert block.label.tolist() == [0, 1]
    assert block.cat_key[1, -1] == 0x68FD1E64


def test_leading_id_column_is_parsed_as_sample_id():
    # Prepare
    lines = ["17\t" + raw_line(), "23\t" + raw_line(label="1")]
    # Execute
    block, bad = _parse(lines, has_id=True)
    # Assert
    assert bad == []
    assert block.sample_id.tolist() == [17, 23]
    assert block.label.tolist() == [0, 1]


def test_integer_too_large_for_int64_is_a_malformed_line_not_a_crash():
    # Prepare
    ints = ["99999999999999999999"] + ["1"] * 12
    # Execute
    block, bad = _parse([raw_line(ints=ints), raw_line()])
    # Assert
    assert [b.line_index for b in bad] == [0] and "I1" in bad[0].reason
    assert block.line_index.tolist() == [1]


def _reference(line: str):
    """A slow, obvious parser: None for a malformed line, else (label, ints, int_missing, cat_text)."""
    import re

    f = line.split("\t")
    if len(f) != 40 or f[0] not in ("0", "1"):
        return None
    ints = []
    for x in f[1:14]:
        if x and (not re.fullmatch(r"-?[0-9]+", x) or not -(2**63) < int(x) < 2**63):
            return None
        ints.append(int(x) if x else 0)
    return int(f[0]), ints, [x == "" for x in f[1:14]], f[14:]


def test_tokenizer_agrees_with_a_reference_parser_on_random_lines():
    # Prepare: seeded random lines mixing valid fields with every kind of damage
    rng = np.random.default_rng(123)
    good_ints = ["", "0", "7", "-1", "12345678", "123456789", "-987654321012", "9223372036854775807"]
    bad_ints = ["-", "1.5", "x", "99999999999999999999", "1e3"]
    cats = ["", "68fd1e64", "ABCDEF01", "abc", "zzzzzzzz", "0000000g", "1234567890"]
    lines = []
    for _ in range(3000):
        ints = [str(rng.choice(bad_ints if rng.random() < 0.005 else good_ints)) for _ in range(13)]
        fields = [str(rng.choice(["0", "1", "1", "1", "0", "2"]))] + ints + [str(rng.choice(cats)) for _ in range(26)]
        cut = rng.random()
        if cut < 0.05:
            fields = fields[:-1]
        elif cut < 0.1:
            fields = fields + ["extra"]
        lines.append("\t".join(fields))
    # Execute
    block, bad = _parse(lines)
    # Assert: the same lines are accepted, with the same values
    expected = [(i, r) for i, r in enumerate(map(_reference, lines)) if r is not None]
    assert block.line_index.tolist() == [i for i, _ in expected]
    assert len(bad) == len(lines) - len(expected)
    assert 0.4 * len(lines) < len(expected) < 0.9 * len(lines)  # both paths are exercised
    for row, (_, (label, ints, missing, cats)) in enumerate(expected):
        assert block.label[row] == label
        assert block.dense[row].tolist() == ints and block.dense_missing[row].tolist() == missing
        assert block.cat_missing[row].tolist() == [c == "" for c in cats]
        for c, key in zip(cats, block.cat_key[row].tolist()):
            if len(c) == 8 and all(ch in "0123456789abcdefABCDEF" for ch in c):
                assert key == int(c, 16)
