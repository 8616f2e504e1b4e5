"""Using a table run from its directory alone (issue 41 item 3): `run_vfl_predict_local.sh --run RUN` scores new files
of a table run, `export` and `serve` take `--run RUN` for the shard, keys and checkpoint, a follower's `--keys DIR`
finds the leader's key by the leader's party name, a wrong data.path names the real fix, and export.json records the
step of the weights it exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.support.paths import REPO
from tests.support.table_run import table_run

pytest.importorskip("onnxruntime")


def _follower_yaml(directory, party: str = "telco") -> str:
    path = os.path.join(directory, f"{party}.yaml")
    doc = {
        "role": "follower",
        "party": party,
        "network": {"connect": "tcp://127.0.0.1:5999"},
        "data": {"path": os.path.join(directory, "nowhere", party)},
        "output": {"dir": os.path.join(directory, "run")},
    }
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def _keys(directory, *parties) -> str:
    from vfl.wire.curve_keys import create_key_pair

    for p in parties:
        create_key_pair(p, directory)
    return str(directory)


def _manifest(run, party: str, labelled: bool) -> None:
    os.makedirs(os.path.join(run, "shards", party), exist_ok=True)
    with open(os.path.join(run, "shards", party, "manifest.json"), "w") as f:
        json.dump({"party": {"name": party, "has_labels": labelled}}, f)


def test_a_followers_keys_dir_pins_the_leader_key_by_the_leaders_party_name(tmp_path):
    from vfl.config.schema import load_config

    # Prepare: the keys of a leader named bank and of the follower telco, as run_table_local.sh writes them
    keys = _keys(tmp_path / "keys", "bank", "telco")
    cfg_path = _follower_yaml(tmp_path)
    # Execute
    cfg = load_config(cfg_path, keys_dir=keys)
    # Assert: the only other public key is the leader's; the follower's own secret key is its own
    assert str(cfg.network.leader_key_file) == os.path.join(keys, "bank.key")
    assert str(cfg.network.secret_key_file) == os.path.join(keys, "telco.key_secret")


def test_three_parties_keys_take_the_labelled_shards_party_and_an_unresolvable_dir_names_the_fix(tmp_path):
    from vfl.config.schema import ConfigError, load_config

    # Prepare: RUN/keys of bank, shop and telco; no shard says who holds the labels yet
    run = tmp_path / "run"
    keys = _keys(run / "keys", "bank", "shop", "telco")
    cfg_path = _follower_yaml(tmp_path)
    # Execute / Assert: two candidates and no layout: one line naming them and the setting
    with pytest.raises(ConfigError, match=r"bank\.key, shop\.key .*network\.leader_key_file="):
        load_config(cfg_path, keys_dir=keys)
    # Prepare: the run's shards say bank holds the labels
    _manifest(run, "bank", True)
    _manifest(run, "shop", False)
    # Execute
    cfg = load_config(cfg_path, keys_dir=keys)
    # Assert
    assert str(cfg.network.leader_key_file) == os.path.join(keys, "bank.key")
    # Power: an explicit network.leader_key_file wins, and DIR/leader.key is still taken first
    explicit = load_config(cfg_path, {"network.leader_key_file": os.path.join(keys, "shop.key")}, keys_dir=keys)
    assert str(explicit.network.leader_key_file) == os.path.join(keys, "shop.key")
    _keys(run / "keys", "leader")
    assert str(load_config(cfg_path, keys_dir=keys).network.leader_key_file) == os.path.join(keys, "leader.key")


def test_a_missing_data_path_names_the_runs_shard_as_the_fix(tmp_path):
    from vfl.config.schema import load_config
    from vfl.data.errors import DataError
    from vfl.preflight import preflight

    # Prepare: output.dir is a run holding shards/telco; data.path names a place that does not exist
    cfg = load_config(_follower_yaml(tmp_path))
    _manifest(tmp_path / "run", "telco", False)
    # Execute / Assert: the fix is --data RUN/shards/telco, not a prepare
    with pytest.raises(DataError, match=r"pass --data .*run/shards/telco"):
        preflight(cfg)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return table_run(str(tmp_path_factory.getbasetemp() / "table_run"))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_the_predict_script_scores_new_files_of_a_table_run_from_run_alone(run, tmp_path):
    from vfl.data.ids import ids64

    # Prepare: each party's file of new customers (ids never prepared)
    out = tmp_path / "predict"
    # Execute: the Criteo script learns the table layout from the run
    done = _cli(
        "bash",
        "scripts/run_vfl_predict_local.sh",
        "--run",
        run["run"],
        "--out",
        str(out),
        "--table",
        f"bank={run['new']['bank']}",
        "--table",
        f"telco={run['new']['telco']}",
        timeout=600,
    )
    # Assert: exactly the new customers both parties hold are scored
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    both = set(ids64(run["new_frames"]["bank"]["cust"]).tolist()) & set(
        ids64(run["new_frames"]["telco"]["cust"]).tolist()
    )
    scored = pd.read_csv(out / "predictions.csv")
    assert sorted(scored["id"]) == sorted(both) and scored["score"].notna().all()


def test_export_takes_run_alone_and_records_the_step_of_the_weights_it_exported(run, tmp_path):
    from vfl.training.checkpoint import load_checkpoint, save_checkpoint

    # Prepare: the run's YAMLs name a data.path that does not exist; the selected step of the run
    metrics = json.load(open(os.path.join(run["run"], "metrics.json")))
    configs = run["configs"]
    # Execute: without --run the error names the fix; with --run both parties export
    lost = _cli(sys.executable, "-m", "follower", "export", "--config", f"{configs}/telco.yaml", "--out", str(tmp_path))
    done = {
        p: _cli(
            sys.executable,
            "-m",
            role,
            "export",
            "--config",
            f"{configs}/{p}.yaml",
            "--run",
            run["run"],
            "--out",
            str(tmp_path / "export"),
        )
        for p, role in (("bank", "leader"), ("telco", "follower"))
    }
    # Assert
    assert lost.returncode == 2 and "--data" in lost.stderr and "--run" in lost.stderr, lost.stderr
    for p, r in done.items():
        assert r.returncode == 0, r.stderr
        doc = json.load(open(tmp_path / "export" / p / "export.json"))
        assert doc["checkpoint"]["step"] == metrics["model_step"]
    # Prepare: the leader's checkpoint as model selection leaves it when it restores an earlier step (weights of
    # step s, trained to a later step)
    ckpt = load_checkpoint(os.path.join(run["run"], "checkpoints", "bank_final.pt"))
    ckpt["extra"]["run"]["model_step"] = int(ckpt["step"]) - 7
    restored = str(tmp_path / "bank_restored.pt")
    save_checkpoint(restored, "bank", ckpt["state"], ckpt["epoch"], ckpt["step"], ckpt["extra"])
    # Execute
    r = _cli(
        sys.executable,
        "-m",
        "leader",
        "export",
        "--config",
        f"{configs}/bank.yaml",
        "--run",
        run["run"],
        "--checkpoint",
        restored,
        "--out",
        str(tmp_path / "restored"),
    )
    # Assert: export.json says which weights it holds (the selected step), and where training ended
    assert r.returncode == 0, r.stderr
    doc = json.load(open(tmp_path / "restored" / "bank" / "export.json"))
    assert doc["checkpoint"]["step"] == int(ckpt["step"]) - 7
    assert doc["checkpoint"]["trained_steps"] == int(ckpt["step"])
