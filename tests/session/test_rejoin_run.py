"""A run that survives a party's restart or pause: leader and follower as real processes over tcp with `--resume auto`;
one of them is killed with SIGKILL in the middle of training (synchronised on the leader's log) and started again with
`--resume auto`, as a supervisor would; the parties agree on the latest checkpoint both hold, roll back to it and
finish. A follower stopped (SIGSTOP) past the leader's deadline is waited for and goes on where it was. Without label
or embedding DP at staleness 0 the final weights are the uninterrupted run's, bit for bit."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from tests.support.party_processes import party_configs
from vfl.training.checkpoint import load_checkpoint

# 2 epochs of 10 steps (synth_tiny's 3000 ids at batch 256); a checkpoint every 3 steps, an evaluation every 6
TRAIN = {"epochs": 2, "batch_size": 256, "eval_every_steps": 6, "eval_batch_size": 512, "checkpoint_every": 3,
         "log_every": 1}  # fmt: skip
KILL_AFTER = "epoch 0 step 5/"  # the leader's loss line of global step 5: the checkpoint of step 3 exists


@pytest.fixture(scope="module")
def shards_rejoin(synth_tiny, tmp_path_factory):
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    out = tmp_path_factory.mktemp("rejoin") / "shards"
    prepare(str(synth_tiny), str(out), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    return out


LABEL_DP = {"label_dp": {"eps": 2.0}}


@pytest.fixture(scope="module")
def clean_runs(shards_rejoin, tmp_path_factory):
    """The uninterrupted run (no --resume auto) of a privacy setting, run once: its metrics and final weights."""
    from tests.support.party_processes import Procs

    runs = {}

    def clean(privacy: dict | None) -> tuple[dict, dict]:
        key = json.dumps(privacy, sort_keys=True)
        if key not in runs:
            tmp = tmp_path_factory.mktemp("clean")
            cfgs = party_configs(str(tmp), str(shards_rejoin), train=TRAIN, privacy=privacy)
            procs = Procs()
            try:
                procs.start("leader", "leader", cfgs["leader"])
                procs.start("follower0", "follower", cfgs["follower0"])
                for name in ("leader", "follower0"):
                    code, _, err = procs.wait(name, timeout=120)
                    assert code == 0, f"{name} failed: {err[-3000:]}"
            finally:
                procs.cleanup()
            runs[key] = _outcome(tmp)
        return runs[key]

    return clean


def _outcome(tmp) -> tuple[dict, dict]:
    out = os.path.join(tmp, "out")
    weights = {
        p: load_checkpoint(os.path.join(out, "checkpoints", f"{p}_final.pt"))["state"] for p in ("leader", "follower0")
    }
    return json.loads(open(os.path.join(out, "metrics.json")).read()), weights


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize(
    "killed, privacy",
    [
        ("follower0", None),
        ("leader", None),
        pytest.param("leader", LABEL_DP, marks=pytest.mark.slow, id="leader-label_dp"),
    ],
)
def test_a_party_killed_mid_run_and_restarted_with_resume_auto_rejoins_and_the_model_is_bit_identical(
    tmp_path, shards_rejoin, clean_runs, procs, killed, privacy
):
    """Both parties start with --resume auto; after the leader logs global step 5 (the checkpoint of step 3 is
    written), `killed` gets SIGKILL and is started again with --resume auto. The survivor waits (network.reconnect_s),
    the parties agree on the latest step both hold and go back to it; both exit 0, the logs say who rejoined from
    which checkpoint, and every party's final weights and the test AUC equal the uninterrupted run's. Under label DP
    the restarted leader trains on the same release (its noisy labels are keyed by the leader's key), found in the
    ledger: no release is recorded or charged again."""
    # Prepare
    clean, clean_weights = clean_runs(privacy)
    cfgs = party_configs(str(tmp_path), str(shards_rejoin), train=TRAIN, privacy=privacy)
    log = {p: os.path.join(tmp_path, "out", f"{p}.log") for p in ("leader", "follower0")}
    procs.start("leader", "leader", cfgs["leader"], "--resume", "auto")
    procs.start("follower0", "follower", cfgs["follower0"], "--resume", "auto")
    procs.wait_for_line("leader", log["leader"], KILL_AFTER, timeout=90)
    # Execute: SIGKILL, then the supervisor's restart
    procs.kill(killed)
    assert procs.procs[killed].returncode == -9
    role = "leader" if killed == "leader" else "follower"
    procs.start(f"{killed}-again", role, cfgs[killed], "--resume", "auto")
    survivor = "follower0" if killed == "leader" else "leader"
    # Assert: both finish, from a checkpoint both hold, with the uninterrupted run's model
    for name in (survivor, f"{killed}-again"):
        code, _, err = procs.wait(name, timeout=120)
        assert code == 0, f"{name} failed: {err[-3000:]}"
    for party in ("leader", "follower0"):
        text = open(log[party]).read()
        assert f"rejoin: --resume auto resumes {party} from" in text, text[-3000:]
    flap, weights = _outcome(tmp_path)
    for party in ("leader", "follower0"):
        assert _same(weights[party], clean_weights[party]), f"{party}'s final weights differ after the restart"
    assert flap["test_auc"] == clean["test_auc"]
    assert flap["steps"] == clean["steps"]
    if privacy:  # the same release, found in the ledger (one release of this dataset, the clean run's)
        assert flap["label_dp"]["release_id"] == clean["label_dp"]["release_id"]
        assert flap["label_dp"]["new_release"] is False and flap["label_dp"]["dataset_releases"] == 1


def test_a_follower_paused_past_the_leaders_deadline_but_within_reconnect_s_goes_on_and_the_model_is_bit_identical(
    tmp_path, shards_rejoin, clean_runs, procs
):
    """The follower is stopped (SIGSTOP) after the leader logs global step 5, and continued (SIGCONT) once the leader
    has said that it heard nothing within network.timeout_s (4 s, above the 2 s heartbeat interval) and waits for it
    (network.reconnect_s 300): the connection stayed open, so nothing is resent; both exit 0 and the final weights
    are the uninterrupted run's."""
    # Prepare
    clean, clean_weights = clean_runs(None)
    cfgs = party_configs(str(tmp_path), str(shards_rejoin), train=TRAIN)
    log = os.path.join(tmp_path, "out", "leader.log")
    procs.start("leader", "leader", cfgs["leader"], "--timeout", "4")
    procs.start("follower0", "follower", cfgs["follower0"])
    procs.wait_for_line("leader", log, KILL_AFTER, timeout=90)
    # Execute: paused until the leader says it waits
    os.killpg(procs.procs["follower0"].pid, signal.SIGSTOP)
    try:
        procs.wait_for_line("leader", log, "(no message within network.timeout_s)", timeout=60)
    finally:
        os.killpg(procs.procs["follower0"].pid, signal.SIGCONT)
    # Assert
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, timeout=120)
        assert code == 0, f"{name} failed: {err[-3000:]}"
    text = open(log).read()
    assert "link to follower0 back after" in text and "nothing to resend" in text, text[-3000:]
    paused, weights = _outcome(tmp_path)
    for party in ("leader", "follower0"):
        assert _same(weights[party], clean_weights[party]), f"{party}'s final weights differ after the pause"
    assert paused["test_auc"] == clean["test_auc"]
