"""What `--run RUN` finds: a party's shard and the run's keys filled in unless given, the checkpoint prediction reads
by default, and a data.path that is not a directory refused naming the run's own shard."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vfl.data.errors import DataError
from vfl.runs.layout import apply_run, check_shard_path, default_checkpoint


def _run_dir(tmp_path):
    run = tmp_path / "run"
    (run / "shards" / "follower0").mkdir(parents=True)
    (run / "keys").mkdir()
    config = tmp_path / "follower0.yaml"
    config.write_text("party: follower0\nrole: follower\nnetwork: {}\n")
    return run, config


def test_a_run_fills_the_shard_and_the_keys_only_where_not_given(tmp_path):
    # Prepare
    run, config = _run_dir(tmp_path)
    bare = SimpleNamespace(run=str(run), config=str(config), data=None, keys=None)
    given = SimpleNamespace(run=str(run), config=str(config), data="mine", keys="my_keys")
    # Execute
    notes = apply_run(bare)
    none = apply_run(given)
    # Assert
    assert (bare.data, bare.keys) == (str(run / "shards" / "follower0"), str(run / "keys"))
    assert notes == [f"--data {run / 'shards' / 'follower0'}", f"--keys {run / 'keys'}"]
    assert none == [] and (given.data, given.keys) == ("mine", "my_keys")


def test_prediction_reads_the_final_checkpoint_of_the_run_or_of_output_dir():
    # Prepare
    cfg = SimpleNamespace(party="leader", output=SimpleNamespace(dir="/out"))
    # Execute / Assert
    assert default_checkpoint(cfg, "/run") == "/run/checkpoints/leader_final.pt"
    assert default_checkpoint(cfg, None) == "/out/checkpoints/leader_final.pt"


def test_a_data_path_that_is_not_a_directory_names_the_runs_own_shard(tmp_path):
    # Prepare
    run, _ = _run_dir(tmp_path)
    cfg = SimpleNamespace(
        party="follower0", data=SimpleNamespace(path=tmp_path / "absent"), output=SimpleNamespace(dir=str(run))
    )
    # Execute / Assert
    with pytest.raises(DataError, match=r"does not exist or is not a directory: this run's shard of follower0 is "):
        check_shard_path(cfg, "python -m follower predict")
