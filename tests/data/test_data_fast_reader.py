"""The fast reader (pyarrow's CSV reader, whole-column parsing: vfl/data/readers/arrow_text.py) gives exactly what the
pandas text path gives: the same shard bytes, manifests and warnings, for a Criteo party file and for a table under
its schema, edge values included (long and exponent floats, NA tokens, padded values, '+' and out-of-range integer
ids, a bad value skipped with its line). The Criteo party shard is also pinned: documented figures rest on it. Only
what is CPU-independent is pinned bit for bit (ids, categorical ids, missing flags, labels); the float features go
through numpy's vectorised log1p, whose last bit depends on the CPU's SIMD path (AVX-512 and AVX2 differ by 1 ulp on
about 0.5% of values), so they are pinned to a stated tolerance: within 4 float32 ulp of a float64 reference
computed here from the raw integers (numpy documents <= 4 ulp for its float32 SIMD log paths), and each column's
float64 sum within rtol 1e-6 of its pinned value (4 ulp on every one of 9,627 values moves a sum by < 5e-7)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import numpy as np
import pytest
import yaml

from vfl.data.__main__ import main as data_main
from vfl.data.readers import arrow_text

TIMING = {"prepare_seconds", "rows_per_second", "seconds_total", "peak_rss_mib", "path", "truth_path"}
# sha256 over the integer arrays of the leader's shard of synth_small's split (hash mode, 2000 buckets), as the pandas
# text path wrote it before the fast reader existed (the same bytes on every CPU)
LEADER_SHARD_INT_DIGEST = "46dcf0cc94bd3e74b14c30a2304109a6206fb89dabbc6893efc0ced85dd356ba"
# float64 column sums of that shard's train/dense.npy (I1-I7 after the signed log), written on an Intel Xeon with
# AVX-512; numpy's AVX2 path (NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR", as on an AMD EPYC without
# AVX-512) gave the same integer digest, dense values within 1 ulp, and these sums within rtol 3e-9
LEADER_TRAIN_DENSE_SUMS = [
    4554.899817943573,
    14122.555962085724,
    19617.40719270706,
    14473.109527111053,
    80038.74973893166,
    30026.85346388817,
    16533.16304206848,
]
DENSE_ULP_TOLERANCE = 4


def _strip(d):
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if k not in TIMING}
    if isinstance(d, list):
        return [_strip(v) for v in d]
    return d


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for r, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(r, f)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def _same_shard(a: str, b: str) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        if name.endswith(".json"):
            assert _strip(json.loads(fa[name])) == _strip(json.loads(fb[name])), name
        else:
            assert fa[name] == fb[name], name


def _int_digest(shard: str) -> str:
    h = hashlib.sha256()
    for split in ("train", "valid", "test"):
        for name in ("ids", "dense_missing", "cat", "labels"):
            p = os.path.join(shard, split, f"{name}.npy")
            if os.path.exists(p):
                a = np.load(p)
                h.update(f"{split}/{name}{a.dtype}{a.shape}".encode())
                h.update(a.tobytes())
    return h.hexdigest()


def _both(monkeypatch, run) -> None:
    """run(out_dir) with the fast reader, then with the text path only."""
    run("fast")
    monkeypatch.setattr(arrow_text, "ENABLED", False)
    run("text")


def test_a_criteo_party_file_gives_the_same_shard_on_both_paths_and_the_pinned_one(
    synth_small, vertical_raw, tmp_path, monkeypatch
):
    # Prepare: each party's own file (TSV with e-mail and integer ids; CSV), hash buckets and a vocabulary
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare_party
    from vfl.data.raw_split import split_raw

    # the pinned shard predates synthetic files' own id column: cut the file as it was then (ids = line numbers)
    lines = synth_small.read_text().splitlines(keepends=True)
    (tmp_path / "line_ids.tsv").write_text("".join(line.split("\t", 1)[1] for line in lines))
    cut = split_raw(str(tmp_path / "line_ids.tsv"), str(tmp_path / "cut"), load_parties(None))["files"]["leader"]
    cases = [(p, str(vertical_raw[p.name]), PrepareOptions(hash_buckets=2_000)) for p in load_parties(None)]
    cases += [(load_parties(None)[0], str(vertical_raw["leader"]), PrepareOptions(vocab_min_count=3))]
    cases += [(load_parties(None)[0], cut, PrepareOptions(hash_buckets=2_000))]

    # Execute
    def run(tag):
        for k, (p, path, opts) in enumerate(cases):
            prepare_party(path, str(tmp_path / tag / str(k)), p, opts)

    _both(monkeypatch, run)
    # Assert
    for k in range(len(cases)):
        _same_shard(str(tmp_path / "fast" / str(k)), str(tmp_path / "text" / str(k)))
    pinned = str(tmp_path / "fast" / str(len(cases) - 1))
    assert _int_digest(pinned) == LEADER_SHARD_INT_DIGEST
    _assert_dense_within_ulps_of_reference(pinned, cut, DENSE_ULP_TOLERANCE)
    sums = np.load(os.path.join(pinned, "train", "dense.npy")).astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(sums, LEADER_TRAIN_DENSE_SUMS, rtol=1e-6, atol=0)


def _assert_dense_within_ulps_of_reference(shard: str, raw: str, ulps: int) -> None:
    """Each dense value is sign(x) * log1p(|x|) of its raw integer (0 where missing) within `ulps` float32 ulp."""
    import pandas as pd

    table = pd.read_csv(raw, sep="\t", dtype=str, keep_default_na=False).set_index("id")
    for split in ("train", "valid", "test"):
        ids = np.load(os.path.join(shard, split, "ids.npy"))
        dense = np.load(os.path.join(shard, split, "dense.npy"))
        raw_text = table.loc[[str(i) for i in ids], [f"I{k}" for k in range(1, dense.shape[1] + 1)]].to_numpy()
        x = np.array([[float(v) if v != "" else 0.0 for v in row] for row in raw_text])
        reference = np.sign(x) * np.log1p(np.abs(x))
        error_ulps = np.abs(dense.astype(np.float64) - reference) / np.spacing(np.abs(dense).astype(np.float32))
        assert error_ulps.max() <= ulps, (split, float(error_ulps.max()))


SCHEMA = {
    "role": "leader",
    "party": "leader",
    "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
    "data": {
        "path": "unused",
        "schema": {
            "id": "cust",
            "columns": {
                "x": "numeric",
                "big": {"kind": "numeric", "transform": "standardize"},
                "q": {"kind": "numeric", "transform": {"quantile_bins": 4}},
                "city": "categorical",
                "code": {"kind": "categorical", "transform": {"vocabulary": {"min_count": 2}}},
            },
            "label": {"column": "y", "classes": ["no", "yes"]},
        },
    },
}
EDGE_X = ["1011.9", "", "NA", " 3.5 ", "1e-30", "0.30000000000000004", "123456789012345678", "+471E84", "-0", "7."]
EDGE_ID = [" c{i} ", "+{i}", "00{i}", "9999999999999999999{i}", "-{i}", "id {i}", "c{i}"]
EDGE_CAT = ["ab", " ab", "NA", "", "x\u00e9", "None", "12"]


def _edge_table(rows: int, bad_row: int | None) -> str:
    lines = ["cust,x,big,q,city,code,y,unused"]
    for i in range(rows):
        x = EDGE_X[i % len(EDGE_X)] if i != bad_row else "1.5kg"
        ident = EDGE_ID[i % len(EDGE_ID)].format(i=i)
        big = f"{(i * 7919) % 1000003 * 1.0e9:.1f}" if i % 5 else "NaN"
        lines.append(f"{ident},{x},{big},{i % 13 * 0.25},{EDGE_CAT[i % 7]},k{i % 40},{'yes' if i % 3 else 'no'},zz")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("bad_row", [None, 123])
@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
def test_a_table_gives_the_same_shard_and_warnings_on_both_paths(tmp_path, monkeypatch, capsys, bad_row, name):
    # Prepare: a table of edge values, with or without a non-numeric value in a numeric column
    cfg = tmp_path / "leader.yaml"
    cfg.write_text(yaml.safe_dump(SCHEMA))
    path = tmp_path / name
    text = _edge_table(1500, bad_row).encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    errs = {}

    # Execute
    def run(tag):
        code = data_main(["prepare", "--config", str(cfg), "--input", str(path), "--out", str(tmp_path / tag)])
        assert code == 0
        err = capsys.readouterr().err
        errs[tag] = [ln for ln in err.splitlines() if "rows/s" not in ln and str(tmp_path / tag) not in ln]

    _both(monkeypatch, run)
    # Assert: identical shards and warnings; the bad value is named with its line and column
    _same_shard(str(tmp_path / "fast"), str(tmp_path / "text"))
    assert errs["fast"] == errs["text"]
    if bad_row is not None:
        assert any(f"line {bad_row + 2}" in ln and "x is not a finite number" in ln for ln in errs["fast"]), errs[
            "fast"
        ]


def test_strict_refuses_the_same_line_on_both_paths(tmp_path, monkeypatch, capsys):
    # Prepare
    cfg = tmp_path / "leader.yaml"
    cfg.write_text(yaml.safe_dump(SCHEMA))
    path = tmp_path / "t.csv"
    path.write_text(_edge_table(400, 77))
    errs = {}

    # Execute
    def run(tag):
        code = data_main(
            ["prepare", "--config", str(cfg), "--input", str(path), "--out", str(tmp_path / tag), "--strict"]
        )
        errs[tag] = (code, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")])

    _both(monkeypatch, run)
    # Assert
    assert errs["fast"] == errs["text"] and errs["fast"][0] != 0
    assert "line 79" in errs["fast"][1][0] and not (tmp_path / "fast").exists()


def test_a_line_pyarrow_cannot_read_is_left_to_the_text_path(tmp_path, monkeypatch, capsys):
    # Prepare: a line with too many fields in the middle of the file
    cfg = tmp_path / "leader.yaml"
    cfg.write_text(yaml.safe_dump(SCHEMA))
    lines = _edge_table(300, None).splitlines()
    lines[150] += ",extra"
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    errs = {}

    # Execute
    def run(tag):
        code = data_main(["prepare", "--config", str(cfg), "--input", str(path), "--out", str(tmp_path / tag)])
        errs[tag] = (code, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")])

    _both(monkeypatch, run)
    # Assert: the same outcome (the pandas parser's error naming the line)
    assert errs["fast"] == errs["text"]
