"""benchmarks/wan.py's own logic, without running a grid: its flags refuse bad values in one line, a cell whose
config key the tree does not know is named for skipping, and the bounds beside a cell are the link's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import wan as bench
from tests.support.paths import REPO


def test_an_unknown_link_is_refused_in_one_line_before_anything_runs():
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.wan", "--links", "loopback,5ms"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert r.returncode == 2 and r.stderr.strip() == "error: --links '5ms': allowed: loopback, 10ms, 40ms, 100ms"


def test_a_set_without_a_value_is_refused_in_one_line_and_the_wide_cut_keys_are_known():
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.wan", "--set", "model.bottom.cut_dim"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    wide = {"model.bottom.cut_dim": "32", "model.top.name": "mlp", "model.top.hidden": "[64,32]"}
    # Assert
    assert r.returncode == 2 and r.stderr.strip() == "error: --set 'model.bottom.cut_dim': expected KEY=VALUE"
    assert bench.unknown_keys(wide) is None


def test_a_cell_whose_key_the_config_does_not_know_is_named_and_a_known_one_passes():
    # Execute
    unknown = bench.unknown_keys({"train.stalenes": "2"})
    known = bench.unknown_keys({"train.epochs": "1", "data.psi_reuse": "false"})
    # Assert
    assert unknown is not None and "stalenes" in unknown and "\n" not in unknown
    assert known is None


def test_a_cell_gets_the_bounds_of_its_link_and_schedule():
    # Prepare: 40 ms / 100 Mbit/s, 10 B up and 8 B down a sample, 10k samples/s on loopback, staleness 4
    cell = {"link": "40ms", "schedule": "4", "bytes_up_per_sample": 10.0, "bytes_down_per_sample": 8.0}
    # Execute
    bench.with_bounds(cell, 10_000.0, 1024)
    # Assert: bandwidth 12.5 MB/s / 10 B; latency 1024 x 5 / 0.04 s
    assert cell["bounds"]["bandwidth_sps"] == pytest.approx(1_250_000)
    assert cell["bounds"]["latency_sps"] == pytest.approx(128_000) and cell["bounds"]["compute_sps"] == 10_000


def test_the_accuracy_grid_sizes_each_run_length_and_every_variant_is_a_config_both_parties_take():
    """--grid accuracy: S steps are 2 epochs of batch 1024 over the rows it prepares, and every variant's overrides
    (with its staleness) pass both parties' configs, so no cell of the grid is skipped for a key."""
    from benchmarks import wan_accuracy as grid

    # Execute / Assert
    from vfl.data.shards import steps_per_epoch

    for steps in (300, 500, 800, 2300):
        train_rows = int(grid.rows_for(steps) * grid.TRAIN_SHARE)
        assert grid.EPOCHS * steps_per_epoch(train_rows, grid.BATCH) in (steps, steps + 1, steps + 2)
    for name, overrides in grid.VARIANTS.items():
        cell = {"train.staleness": grid.staleness_of(name, 4), **overrides}
        assert bench.unknown_keys(cell) is None, name
    assert grid.staleness_of("sync", 4) == "0" and grid.staleness_of("auto", 4) == "auto"


def test_an_unknown_variant_of_the_accuracy_grid_is_refused_in_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.wan", "--grid", "accuracy", "--variants", "K,K+magic", "--steps", "300"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "--variants 'K+magic': allowed: sync, K, K+dc" in r.stdout + r.stderr
