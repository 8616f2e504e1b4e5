"""What the multi-party launch script shows and passes on: each `--set` goes to the parties whose role takes its key
(a leader-only key such as train.early_stopping.patience to the leader only, said on the console), and the console
shows each party's warnings, its PSI line and the label-DP summary, not only the final metric."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.support.own_table import SCHEMAS, own_table
from vfl.config.party_sets import FOLLOWER_ONLY, LEADER_ONLY, role_of
from vfl.config.role_rules import role_problems
from vfl.obs.run_summary import party_lines, summary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALUES = {  # a value each role-limited key takes
    "data.schema.label": {"column": "y"},
    "network.bind": "tcp://127.0.0.1:5999",
    "network.followers": ["shop"],
    "network.follower_keys": {"shop": "shop.key"},
    "model.top": {"name": "linear"},
    "train.early_stopping": {"patience": 8},
    "train.task": "binary",
    "train.loss": "huber",
    "train.staleness_leader_bottom": "stale",
    "privacy.label_dp": {"eps": 1.0},
    "network.connect": "tcp://127.0.0.1:5999",
    "network.rank_endpoints": ["tcp://127.0.0.1:6000"],
    "network.leader_key_file": "leader.key",
    "debug.record_gradients": "grads.npz",
}


def _doc_with(role: str, key: str, value) -> dict:
    doc = {"role": role, "party": "p", "data": {"schema": {"id": "cust"}}}
    node = doc
    *parents, last = key.split(".")
    for k in parents:
        node = node.setdefault(k, {})
    node[last] = value
    return doc


@pytest.mark.parametrize("key", LEADER_ONLY + FOLLOWER_ONLY)
def test_each_role_limited_key_is_refused_by_the_other_role_and_routed_to_its_own(key):
    # Prepare: the role that takes the key, and the other
    own = "leader" if key in LEADER_ONLY else "follower"
    other = "follower" if own == "leader" else "leader"
    # Execute
    on_other = role_problems(_doc_with(other, key, VALUES[key]), r"^[a-z]+$", 1024, 10.0)
    # Assert: the config rules refuse it on the other role (so the routing table is not stale), and it goes to its own
    assert any(e.startswith(key + " ") for e in on_other), (key, on_other)
    assert role_of(key) == own and role_of(key + ".sub") == own


def test_a_key_every_role_takes_goes_to_all_and_a_prefix_is_not_confused():
    # Execute / Assert: train.lr is everyone's; train.tasks (no such key) is not train.task's
    assert role_of("train.lr") == role_of("train.epochs") == role_of("model.bottom.name") == "all"
    assert role_of("train.tasks") == "all" and role_of("train.early_stopping.patience") == "leader"


def test_the_summary_keeps_the_last_runs_warnings_psi_and_label_dp_lines(tmp_path):
    # Prepare: a leader log of two runs appended, and the run's metrics.json
    t = "2026-11-27T15:00:00.000"
    old = [f"{t} INFO leader bank: config, keys and data checked (x)", f"{t} WARNING leader bank: an old warning"]
    new = [
        f"{t} INFO leader bank: config, keys and data checked (x)",
        f"{t} INFO leader bank: PSI intersection 900 ids (leader 1000, ...)",
        f"{t} WARNING leader bank: this run trains 38 step(s)",
        f"{t} INFO leader bank: defaults: sized from the table (900 training rows), unset in the config: ...",
        f"{t} INFO label DP: laplace eps=1.0 once per sample; noise RMSE 9.1 on the training labels",
        f"{t} INFO epoch 0 step 19/19 loss: 0.669465",
    ]
    (tmp_path / "bank.log").write_text("\n".join(old + new) + "\n")
    label_dp = {"mechanism": "laplace", "eps": 1.0, "noise_rmse": 9.1, "dataset_total_eps": 3.0}
    (tmp_path / "metrics.json").write_text(json.dumps({"label_dp": {**label_dp, "dataset_releases": 2}}))
    # Execute
    lines = party_lines(str(tmp_path / "bank.log"))
    shown = summary(str(tmp_path), ["bank"])
    # Assert: the last run's lines only, the loss lines left to the log; the ledger's total from metrics.json
    assert lines == [
        "leader bank: PSI intersection 900 ids (leader 1000, ...)",
        "warning: leader bank: this run trains 38 step(s)",
        "leader bank: defaults: sized from the table (900 training rows), unset in the config: ...",
        "label DP: laplace eps=1.0 once per sample; noise RMSE 9.1 on the training labels",
    ]
    assert (
        shown[-1].startswith("run: label DP: laplace eps=1.0; noise RMSE 9.1") and "total eps 3.0 over 2" in shown[-1]
    )
    assert shown[3] == "bank: label DP: laplace eps=1.0 once per sample; noise RMSE 9.1 on the training labels"


def test_the_table_script_routes_a_leader_only_set_and_shows_warnings_psi_and_label_dp(tmp_path):
    # Prepare: two parties' tables and YAMLs (a short run: the leader warns about its step count)
    frames = own_table(1500, seed=3)
    cfgs = tmp_path / "cfg"
    cfgs.mkdir()
    train = {"batch_size": 128, "epochs": 2, "threads": 1, "allow_short_run": True}
    docs = {
        "leader": {"role": "leader", "party": "leader", "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]}},
        "shop": {"role": "follower", "party": "shop", "network": {"connect": "tcp://127.0.0.1:5999"}},
    }  # fmt: skip
    for name, doc in docs.items():
        doc.update(data={"path": "unused", "schema": SCHEMAS[name]}, train=train)
        (cfgs / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        frames[name].to_csv(tmp_path / f"{name}.csv", index=False)
    out = tmp_path / "run"
    # Execute
    r = subprocess.run(
        ["bash", "scripts/run_table_local.sh", "--configs", str(cfgs), "--out", str(out), "--label-dp", "2"]
        + ["--table", f"leader={tmp_path / 'leader.csv'}", "--table", f"shop={tmp_path / 'shop.csv'}"]
        + ["--set", "train.early_stopping.patience=3", "--set", f"privacy.label_dp.store_dir={tmp_path / 'store'}"]
        + ["--set", "train.lr=0.01"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    # Assert: the run trained; the console says where each --set went and shows what the parties said
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    console = r.stdout
    assert "--set train.early_stopping.patience=3: the leader only (leader)" in console, console
    assert "--set train.lr=0.01:" not in console
    assert "leader leader: PSI intersection 1500 ids" in console and "follower shop: PSI intersection" in console
    assert "warning: leader leader: this run trains" in console, console
    assert "leader: label DP: binary_rr eps=2.0" in console and "run: label DP: binary_rr eps=2.0; flipped" in console
    assert "ledger total eps 2.0 over 1 release(s)" in console and console.rstrip().splitlines()[-2].startswith("final")
