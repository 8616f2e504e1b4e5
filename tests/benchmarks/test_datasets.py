"""The benches' one synthetic-data cache (benchmarks/datasets.py): a file is written with the seeds asked for, kept
by a later call whatever it asks, and written again when its truth file is missing (a file left half-made)."""

from __future__ import annotations

from benchmarks.datasets import synthetic_criteo
from vfl.data.synth.criteo import write_synthetic


def test_a_synthetic_file_is_written_with_its_seeds_once_and_then_kept(tmp_path):
    # Prepare: the file the seeds give, written directly
    write_synthetic(str(tmp_path / "direct.tsv"), 300, seed=3, label_seed=5)
    path = str(tmp_path / "cached.tsv")
    # Execute: the first call writes, the second (other seeds) finds it
    first = synthetic_criteo(300, path, seed=3, label_seed=5)
    written = (tmp_path / "cached.tsv").read_bytes()
    second = synthetic_criteo(300, path, seed=4, label_seed=6)
    # Assert
    assert first == second == path
    assert written == (tmp_path / "direct.tsv").read_bytes()
    assert (tmp_path / "cached.tsv").read_bytes() == written


def test_a_synthetic_file_without_its_truth_file_is_written_again(tmp_path):
    # Prepare: a file whose truth file is gone and whose rows are not the seeds'
    write_synthetic(str(tmp_path / "direct.tsv"), 300, seed=3, label_seed=5)
    path = tmp_path / "cached.tsv"
    path.write_text("a torn file\n")
    # Execute
    synthetic_criteo(300, str(path), seed=3, label_seed=5)
    # Assert
    assert path.read_bytes() == (tmp_path / "direct.tsv").read_bytes()
    assert (tmp_path / "cached.tsv.truth.npy").read_bytes() == (tmp_path / "direct.tsv.truth.npy").read_bytes()
