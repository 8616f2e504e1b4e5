"""Fail fast: --data given a dataset, a shard, a raw file or nothing; resume/epochs; sizes; --help without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO
from vfl.config.schema import ConfigError, parse_config
from vfl.preflight import (
    CHECKPOINT_WARN_BYTES,
    check_resume,
    projected_checkpoint_bytes,
    resolve_data_path,
    resume_identity,
    size_warning,
)


def _cfg(path="d", model=None, **train):
    return parse_config(
        {
            "role": "leader",
            "party": "leader",
            "data": {"path": str(path)},
            "train": train,
            "network": {"bind": "tcp://127.0.0.1:1", "followers": ["follower0"]},
            "model": model or {"bottom": {"embedding_dim": 16, "hidden": [8]}},
        }
    )


def _party(cfgs_dir, shards, *extra, module="leader"):
    from tests.support.party_processes import party_configs

    cfgs = party_configs(str(cfgs_dir), str(shards))
    return subprocess.run(
        [sys.executable, "-m", module, "--config", cfgs["leader" if module == "leader" else "follower0"], *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_data_path_forms_resolve_or_say_what_to_do(shards_small, synth_small, tmp_path):
    # Prepare
    from vfl.data.errors import DataError

    # Execute / Assert: the party's directory, and the dataset directory prepare prints, both work
    assert resolve_data_path(str(shards_small / "leader"), "leader") == (str(shards_small / "leader"), None)
    path, note = resolve_data_path(str(shards_small), "follower0")
    assert path == os.path.join(str(shards_small), "follower0") and "using" in note
    # a raw TSV says to prepare it
    with pytest.raises(
        DataError,
        match=r"is a raw data file, not a party shard: prepare it first with `python -m vfl.data prepare --input",
    ):
        resolve_data_path(str(synth_small), "leader")
    # a missing path says so, and what it must be
    with pytest.raises(DataError, match=r"does not exist: give this party's shard directory DIR/leader"):
        resolve_data_path(str(tmp_path / "nope"), "leader")
    # a dataset without this party names the parties it has
    with pytest.raises(DataError, match=r"shards of \['follower0', 'leader'\], none of them 'carol'"):
        resolve_data_path(str(shards_small), "carol")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="has no manifest.json"):
        resolve_data_path(str(tmp_path / "empty"), "leader")


@pytest.mark.parametrize(
    "what, needle",
    [
        ("raw", "is a raw data file, not a party shard"),
        ("missing", "does not exist"),
    ],
)
def test_party_cli_rejects_bad_data_before_importing_torch(tmp_path, shards_small, synth_small, what, needle):
    # Prepare
    data = str(synth_small) if what == "raw" else str(tmp_path / "missing")
    # Execute
    r = _party(tmp_path, shards_small, "--data", data, "-v")
    # Assert: exit 1 (a data error), one error line, no traceback
    assert r.returncode == 1, r.stderr
    assert needle in r.stderr and r.stderr.count("error:") == 1
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr


def test_party_given_the_dataset_directory_trains(tmp_path, shards_small, procs):
    # Prepare: both parties get --data SHARDS (the path prepare prints), not SHARDS/<party>
    from tests.support.party_processes import party_configs

    cfgs = party_configs(str(tmp_path), str(shards_small), train={"batch_size": 4096})
    # Execute
    procs.start("leader", "leader", cfgs["leader"], "--data", str(shards_small))
    procs.start("follower0", "follower", cfgs["follower0"], "--data", str(shards_small), "-q")
    results = {n: procs.wait(n, 300) for n in ("leader", "follower0")}
    # Assert
    assert all(code == 0 for code, _, _ in results.values()), results
    assert f"using {os.path.join(str(shards_small), 'leader')}" in results["leader"][1]
    assert results["follower0"][1] == ""  # --quiet: no INFO lines on the console
    log = (tmp_path / "out" / "follower0.log").read_text()
    assert "INFO follower follower0: done after" in log and log[:4].isdigit()  # timestamped file lines


def test_resume_past_the_last_epoch_is_refused_before_torch(tmp_path, shards_small):
    # Prepare: a checkpoint sidecar at step 20 of a run with 8 steps per epoch (7200 train rows / 1024)
    ckpt = tmp_path / "leader_final.pt"
    ckpt.write_bytes(b"x")
    (tmp_path / "leader_final.pt.json").write_text(json.dumps({"party": "leader", "epoch": 1, "step": 20}))
    manifest = json.loads((shards_small / "leader" / "manifest.json").read_text())
    spe = -(-manifest["rows"]["train"] // 1024)
    # Execute / Assert
    with pytest.raises(
        ConfigError,
        match=rf"is at global step 20, but train.epochs=2 x {spe} steps ends at step {2 * spe}: pass --epochs {20 // spe + 1}",
    ):
        check_resume(_cfg(shards_small / "leader", epochs=2, batch_size=1024, resume_from=str(ckpt)), manifest)
    check_resume(_cfg(shards_small / "leader", epochs=20 // spe + 1, batch_size=1024, resume_from=str(ckpt)), manifest)
    other = tmp_path / "f.pt"
    other.write_bytes(b"x")
    (tmp_path / "f.pt.json").write_text(json.dumps({"party": "follower0", "step": 1}))
    with pytest.raises(ConfigError, match="belongs to party 'follower0', not 'leader'"):
        check_resume(_cfg(shards_small / "leader", resume_from=str(other)), manifest)
    with pytest.raises(ConfigError, match="does not exist"):
        check_resume(_cfg(shards_small / "leader", resume_from=str(tmp_path / "gone.pt")), manifest)


def test_resume_with_another_model_or_optimizer_is_refused_from_the_sidecar_before_torch(tmp_path, shards_small):
    # Prepare: a checkpoint whose sidecar records a run's models and optimizers
    manifest = json.loads((shards_small / "leader" / "manifest.json").read_text())
    ckpt = tmp_path / "leader_final.pt"
    ckpt.write_bytes(b"x")

    def sidecar(resume):
        (tmp_path / "leader_final.pt.json").write_text(json.dumps({"party": "leader", "step": 0, "resume": resume}))

    cfg = _cfg(shards_small / "leader", resume_from=str(ckpt))
    trained = resume_identity(cfg)
    small = {"embedding_dim": 16, "hidden": [8]}
    changes = {
        "model.bottom": {"model": {"bottom": {**small, "name": "deepfm"}}},
        "model.top": {"model": {"bottom": small, "top": {"name": "mlp", "hidden": [4]}}},
        "train.optimizer": {"optimizer": "sgd"},
        "train.linear_optimizer": {"linear_optimizer": {"lr": 0.1}},
    }
    # Execute / Assert: the same settings resume (another lr is no new layout), an older sidecar without the record too
    sidecar(trained)
    check_resume(cfg, manifest)
    check_resume(_cfg(shards_small / "leader", resume_from=str(ckpt), lr=0.5), manifest)
    sidecar(None)
    check_resume(_cfg(shards_small / "leader", resume_from=str(ckpt), optimizer="sgd"), manifest)
    sidecar(trained)
    for key, change in changes.items():
        other = _cfg(shards_small / "leader", resume_from=str(ckpt), **change)
        with pytest.raises(ConfigError, match=rf"was trained with {key} .*, but this config has .*start a new run"):
            check_resume(other, manifest)
    # a sidecar of another file (a .pt copied over this one without its .json) is stale: read as absent
    import hashlib

    payload = b"the checkpoint's bytes"
    ckpt.write_bytes(b"VFLCKPT1" + hashlib.sha256(payload).digest() + payload)
    deepfm = _cfg(shards_small / "leader", resume_from=str(ckpt), **changes["model.bottom"])
    for digest, refused in ((hashlib.sha256(payload).hexdigest(), True), ("00" * 32, False)):
        (tmp_path / "leader_final.pt.json").write_text(
            json.dumps({"party": "leader", "step": 0, "sha256": digest, "resume": trained})
        )
        if refused:
            with pytest.raises(ConfigError, match="was trained with model.bottom"):
                check_resume(deepfm, manifest)
        else:
            check_resume(deepfm, manifest)


def test_projected_checkpoint_size_matches_a_real_checkpoint_and_large_ones_warn(shards_small, tmp_path):
    # Prepare
    import torch

    from vfl.data.shards import PartyShard
    from vfl.training.checkpoint import save_checkpoint
    from vfl.training.party import BottomParty

    cfg = _cfg(shards_small / "leader")
    shard = PartyShard(str(shards_small / "leader"))
    party = BottomParty(cfg, shard, torch.device("cpu"))
    # Execute
    projected = projected_checkpoint_bytes(cfg, shard.manifest)
    save_checkpoint(str(tmp_path / "c.pt"), "leader", {"bottom": party.state()}, 0, 0)
    actual_weights = sum(t.numel() * 4 for t in party.model.parameters())
    # Assert: weights x 3 (Adam's two moments once trained); the written file holds the weights at least
    assert projected == 3 * actual_weights
    assert os.path.getsize(tmp_path / "c.pt") >= actual_weights
    assert size_warning(cfg, shard.manifest) is None
    big = {
        **shard.manifest,
        "party": {
            **shard.manifest["party"],
            "field_sizes": {c: 1_000_000 for c in shard.manifest["party"]["categorical"]},
        },
    }
    text = size_warning(cfg, big)
    assert (
        projected_checkpoint_bytes(cfg, big) > CHECKPOINT_WARN_BYTES and "GiB" in text and "--vocab-min-count" in text
    )


@pytest.mark.parametrize(
    "module", ["leader", "follower", "vfl.centralized", "vfl.data", "vfl.config", "vfl.horizontal"]
)
def test_help_never_imports_torch(module):
    # Execute
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Assert
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert r.returncode == 0 and "usage:" in r.stdout
    assert "torch" not in imported and "sklearn" not in imported
    if module in ("leader", "follower", "vfl.centralized"):  # not even the schema: --help answers at once
        assert "pydantic" not in imported


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--epochs"], "error: --epochs needs a value"),
        (["--epochs", "--centralized"], "error: --epochs needs a value"),
        (["--data"], "error: --data needs a value"),
        (["--out"], "error: --out needs a value"),
    ],
)
def test_shell_script_value_flags_without_a_value_are_clear_errors(args, needle):
    # Execute
    r = subprocess.run(
        ["bash", "scripts/run_vfl_train_local.sh", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    lp = subprocess.run(
        ["bash", "scripts/run_vfl_train_local_label_dp.sh", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    # Assert
    for res in (r, lp):
        assert res.returncode == 2 and needle in res.stderr and "unbound variable" not in res.stderr


def test_reading_the_dataset_directory_as_a_shard_is_a_data_error_not_a_key_error(shards_small):
    # Prepare
    from vfl.data.errors import DataError
    from vfl.data.shards import PartyShard

    # Execute / Assert
    with pytest.raises(
        DataError, match=r"is the prepared dataset, not one party's shard: .* \['follower0', 'leader'\]"
    ):
        PartyShard(str(shards_small))


def test_shard_role_owner_and_columns_are_checked_from_the_manifest(shards_small):
    # Prepare
    from vfl.data.errors import DataError
    from vfl.preflight import check_shard, read_manifest

    follower_dir, leader_dir = str(shards_small / "follower0"), str(shards_small / "leader")
    follower = parse_config(
        {
            "role": "follower",
            "party": "follower0",
            "data": {"path": follower_dir, "dense": ["I1"]},
            "network": {"connect": "tcp://127.0.0.1:1"},
        }
    )
    # Execute / Assert
    with pytest.raises(DataError, match="which holds no labels; the leader needs the labelled shard"):
        check_shard(_cfg(follower_dir), follower_dir, read_manifest(follower_dir))
    with pytest.raises(DataError, match="a follower must never read labels"):
        check_shard(follower, leader_dir, read_manifest(leader_dir))
    with pytest.raises(DataError, match=r"data.dense \['I1'\] does not match the shard's columns \['I8'"):
        check_shard(follower, follower_dir, read_manifest(follower_dir))
    check_shard(_cfg(leader_dir), leader_dir, read_manifest(leader_dir))


def test_set_and_positional_overrides_are_validated_together_and_verbose_adds_timestamps(tmp_path, shards_small):
    # Execute
    r = _party(tmp_path, shards_small, "--set", "train.lr=fast", "train.optimizer=adamw", "-v")
    # Assert: both bad values in one report, exit 2, before anything else ran
    assert r.returncode == 2
    assert "2 problem(s)" in r.stderr and "train.lr must be a number, got 'fast'" in r.stderr
    assert "train.optimizer must be one of ['adam', 'sgd', 'adagrad'], got 'adamw'" in r.stderr
    bad_data = _party(tmp_path, shards_small, "--data", str(tmp_path / "missing"), "-v")
    assert bad_data.stderr[:2] == "20" and " ERROR error: data.path" in bad_data.stderr  # timestamp and level
