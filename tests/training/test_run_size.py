"""Defaults that do not fit a small table are named with the numbers: a batch larger than the training split, and a
run of fewer than ~50 steps (the example YAMLs' batch of 1024 gave 3 steps on 453 training rows, silently)."""

from __future__ import annotations

from vfl.training.run_size import run_size_warnings


def test_a_batch_larger_than_the_training_rows_and_a_three_step_run_are_both_named():
    # Execute: batch 1024, 3 epochs, 453 training rows (the breast-cancer table of issue 31)
    warnings = run_size_warnings(1024, 3, 453)
    # Assert: both problems, with the numbers and a setting that fits
    assert len(warnings) == 2
    assert "train.batch_size 1024 is larger than the 453 training rows" in warnings[0]
    assert "this run trains 3 step(s) (3 epoch(s) x 1 step(s)" in warnings[1]
    assert "train.batch_size <= 27 or train.epochs >= 50" in warnings[1]


def test_a_run_that_fits_its_table_gets_no_warning():
    # Execute / Assert: 222k rows, batch 1024, 5 epochs: 1090 steps
    assert run_size_warnings(1024, 5, 222_529) == []
    assert run_size_warnings(64, 1, 64 * 50) == []
