"""Several raw files of one party prepared in parallel (one shard set per file, .gz too) read as one dataset."""

from __future__ import annotations

import gzip
import subprocess
import sys

import numpy as np
import pytest

from tests.support.paths import REPO


def _cut(raw: str, out_dir, pieces: int, gz_last: bool = True) -> list[str]:
    """The rows of a party's raw file (with its header) cut into consecutive files; the last gzipped."""
    lines = open(raw).read().splitlines(keepends=True)
    header, body = lines[0], lines[1:]
    bounds = np.linspace(0, len(body), pieces + 1).astype(int)
    paths = []
    for i in range(pieces):
        gz = gz_last and i == pieces - 1
        path = str(out_dir / (f"part{i}.tsv" + (".gz" if gz else "")))
        data = (header + "".join(body[bounds[i] : bounds[i + 1]])).encode()
        with gzip.open(path, "wb") if gz else open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    return paths


def _prepare(inputs: list[str], out, party: str = "leader", extra=()) -> subprocess.CompletedProcess:
    """prepare with 500 hash buckets, or with the categorical encoding `extra` names (the two are alternatives)."""
    encoding = () if "--vocab-min-count" in extra else ("--hash-buckets", "500")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vfl.data",
            "prepare",
            "--party",
            party,
            "--input",
            *inputs,
            "--out",
            str(out),
            *encoding,
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def raw_parties(synth_small, tmp_path_factory):
    out = tmp_path_factory.mktemp("raw")
    r = subprocess.run(
        [sys.executable, "-m", "vfl.data", "split", "--input", str(synth_small), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_three_files_in_parallel_read_as_the_single_file_shard(raw_parties, tmp_path):
    # Prepare: the leader's raw file whole, and cut into three files (the last gzipped)
    from vfl.data.shards import SPLITS, PartyShard

    pieces = _cut(str(raw_parties / "leader.tsv"), tmp_path, 3)
    # Execute
    one = _prepare([str(raw_parties / "leader.tsv")], tmp_path / "one")
    many = _prepare(pieces, tmp_path / "many", extra=("--workers", "2"))
    # Assert: the same ids per split, and the same features and labels for every row, also after restrict()
    assert one.returncode == 0 and many.returncode == 0, many.stderr
    assert "from 3 files in 2 processes" in many.stdout
    a, b = PartyShard(str(tmp_path / "one" / "leader")), PartyShard(str(tmp_path / "many" / "leader"))
    assert a.id_digest == b.id_digest and a.field_sizes == b.field_sizes
    assert len(b.manifest["parts"]) == 3 and b.manifest["source"]["files"][-1].endswith(".gz")
    keep = np.asarray(a.split("train").ids)[::3]
    a.restrict(keep)
    b.restrict(keep)
    for s in SPLITS:
        x, y = a.split(s), b.split(s)
        np.testing.assert_array_equal(x.ids, y.ids)
        np.testing.assert_array_equal(x.labels, y.labels)
        rows = np.arange(len(x))[::-1]  # any row order
        for u, v in zip(x.features(rows), y.features(rows)):
            assert torch_equal(u, v)


def torch_equal(u, v) -> bool:
    return bool((u == v).all())


def test_several_files_refuse_vocabularies_and_shared_ids(raw_parties, tmp_path):
    # Prepare
    pieces = _cut(str(raw_parties / "follower0.tsv"), tmp_path, 2, gz_last=False)
    dup = tmp_path / "dup.tsv"
    dup.write_text(open(pieces[0]).read())
    # Execute
    vocab = _prepare(pieces, tmp_path / "v", "follower0", ("--vocab-min-count", "2"))
    shared = _prepare([pieces[0], str(dup)], tmp_path / "d", "follower0")
    # Assert: clear errors, nothing half-written
    assert vocab.returncode == 2 and "hash mode" in vocab.stderr
    assert shared.returncode == 2 and "share sample ids" in shared.stderr
    assert not (tmp_path / "d" / "follower0").exists() and not list((tmp_path / "d").glob(".*tmp*"))
