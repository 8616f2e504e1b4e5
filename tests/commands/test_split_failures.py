"""Every bad input to a split run ends in a clear one-line error, a non-zero exit and no hang."""

from __future__ import annotations

import os
import socket
import time

import pytest
import yaml

from tests.support.party_processes import free_port, party_configs


def _edit(path: str, fn) -> None:
    doc = yaml.safe_load(open(path))
    fn(doc)
    yaml.safe_dump(doc, open(path, "w"))


def test_unknown_yaml_key_suggests_the_nearest(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _edit(cfgs["leader"], lambda d: d["train"].update({"batch_szie": 4}))
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert code == 2
    assert "unknown key 'train.batch_szie'" in err and "did you mean 'train.batch_size'" in err


def test_value_outside_its_domain_quotes_the_domain(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _edit(cfgs["follower0"], lambda d: d["network"].update({"timeout_s": -3}))
    # Execute
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("follower0", 60)
    # Assert
    assert code == 2
    assert "network.timeout_s must be in (0, 86400], got timeout_s=-3" in err


def test_missing_data_path_is_named(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _edit(cfgs["leader"], lambda d: d["data"].update({"path": str(tmp_path / "nowhere")}))
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert code == 1
    assert "nowhere" in err and "does not exist" in err
    assert err.count("\n") == 1  # one line


def test_follower_prepared_with_another_split_seed_is_refused_at_the_handshake(
    tmp_path, shards_small, synth_small, procs
):
    # Prepare: the follower's shard comes from a preparation with another --seed, so its splits differ
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    other = tmp_path / "other"
    prepare(str(synth_small), str(other), load_parties(None), PrepareOptions(hash_buckets=2_000, seed=5))
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _edit(cfgs["follower0"], lambda d: d["data"].update({"path": str(other / "follower0")}))
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    lcode, _, lerr = procs.wait("leader", 120)
    fcode, _, ferr = procs.wait("follower0", 120)
    # Assert: the PSI agrees on the shared ids, but a sample's split must agree too
    assert lcode == 1 and "follower0's train sample ids after the private set intersection differ" in lerr, lerr
    assert "same --seed" in lerr
    assert fcode == 1 and "leader aborted" in ferr


def test_follower_key_unknown_to_the_leader_is_refused_on_both_sides(tmp_path, shards_small, procs):
    # Prepare: follower0 runs with a fresh key pair the leader was never given. The follower starts first and is
    # already dialling when the leader listens, so its handshake meets the leader at once, however slowly a loaded
    # machine starts processes (started after the leader, it once began dialling after the leader's 12 s had run
    # out); its 30 s deadline only bounds the wait.
    from tests.support.party_processes import party_keys

    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=12)
    stranger = party_keys(str(tmp_path / "stranger"), ("follower0",))["follower0"]
    _edit(cfgs["follower0"], lambda d: d["network"].update({"secret_key_file": stranger[1], "timeout_s": 30}))
    # Execute
    procs.start("follower0", "follower", cfgs["follower0"])
    procs.wait_for_line("follower0", str(tmp_path / "out" / "follower0.log"), "connecting to")
    procs.start("leader", "leader", cfgs["leader"])
    fcode, _, ferr = procs.wait("follower0", 60)
    lcode, _, lerr = procs.wait("leader", 60)
    # Assert: the follower learns at the CURVE handshake; the leader never got a message from it
    assert fcode == 1 and "refused this party's key" in ferr and ferr.count("\n") == 1
    assert lcode == 1 and "timed out after 12 s awaiting PSI hello from follower follower0" in lerr
    # and the leader's console named the refused key once, by its fingerprint (vfl/wire/admission.py)
    from vfl.wire.curve_keys import fingerprint, load_public_key

    named = [line for line in lerr.splitlines() if "refused a CURVE handshake from 127.0.0.1" in line]
    assert len(named) == 1 and fingerprint(load_public_key(stranger[0])) in named[0], lerr


def test_missing_keys_name_the_settings_and_the_key_tool(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _edit(cfgs["leader"], lambda d: d["network"].pop("secret_key_file"))
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert code == 2 and "network.secret_key_file" in err and "python -m vfl.keys new" in err


def test_secret_key_readable_by_others_is_refused_naming_path_and_mode(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small))
    secret = yaml.safe_load(open(cfgs["follower0"]))["network"]["secret_key_file"]
    os.chmod(secret, 0o644)
    # Execute
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("follower0", 60)
    # Assert
    assert code == 2 and f"secret key file {secret} has mode 0644" in err and "chmod 600" in err


def test_port_already_in_use(tmp_path, shards_small, procs):
    # Prepare
    port = free_port()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen(1)
    cfgs = party_configs(str(tmp_path), str(shards_small), port=port)
    try:
        # Execute
        procs.start("leader", "leader", cfgs["leader"])
        code, _, err = procs.wait("leader", 60)
    finally:
        blocker.close()
    # Assert
    assert code == 1 and "address already in use" in err and str(port) in err


def test_follower_that_never_connects_times_out(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=2)
    # Execute
    t0 = time.monotonic()
    procs.start("leader", "leader", cfgs["leader"])
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert code == 1
    assert "timed out after 2 s awaiting PSI hello from follower follower0" in err
    assert time.monotonic() - t0 < 30


def test_leader_that_never_answers_times_out_the_follower(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=2)
    # Execute
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("follower0", 60)
    # Assert
    assert code == 1 and "timed out after 2 s awaiting PSI hello from the leader" in err


def test_follower_killed_mid_training_stops_the_leader_quickly_without_reconnect_s(tmp_path, shards_small, procs):
    # Prepare: many epochs so the kill lands mid-run; a long timeout shows disconnect detection works; reconnect_s 0:
    # the first lost connection ends the run
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=60, train={"epochs": 200, "log_every": 1})
    procs.start("leader", "leader", cfgs["leader"], "network.reconnect_s=0")
    procs.start("follower0", "follower", cfgs["follower0"], "network.reconnect_s=0")
    procs.wait_for_line("leader", os.path.join(tmp_path, "out", "leader.log"), "epoch 0 step 3/")
    # Execute
    t0 = time.monotonic()
    procs.kill("follower0")
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert code == 1 and "connection lost" in err
    assert time.monotonic() - t0 < 20


def test_leader_killed_mid_training_stops_the_follower_without_reconnect_s(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=60, train={"epochs": 200, "log_every": 1})
    procs.start("leader", "leader", cfgs["leader"], "network.reconnect_s=0")
    procs.start("follower0", "follower", cfgs["follower0"], "network.reconnect_s=0")
    procs.wait_for_line("leader", os.path.join(tmp_path, "out", "leader.log"), "epoch 0 step 3/")
    # Execute
    procs.kill("leader")
    code, _, err = procs.wait("follower0", 60)
    # Assert
    assert code == 1 and "connection lost" in err


def test_a_killed_follower_is_waited_for_reconnect_s_then_the_leader_names_the_checkpoint_to_resume_from(
    tmp_path, shards_small, procs
):
    """network.reconnect_s 3: the leader waits for the killed follower that long, then exits 1 with one line naming
    the step it was lost at and the checkpoint to resume from."""
    # Prepare
    cfgs = party_configs(
        str(tmp_path), str(shards_small), timeout_s=60, train={"epochs": 200, "log_every": 1, "checkpoint_every": 2}
    )
    procs.start("leader", "leader", cfgs["leader"], "network.reconnect_s=3")
    procs.start("follower0", "follower", cfgs["follower0"], "network.reconnect_s=3")
    log = os.path.join(tmp_path, "out", "leader.log")
    procs.wait_for_line("leader", log, "epoch 0 step 5/")
    # Execute
    t0 = time.monotonic()
    procs.kill("follower0")
    code, _, err = procs.wait("leader", 60)
    # Assert
    assert 3 <= time.monotonic() - t0 < 20
    last = err.strip().splitlines()[-1]
    assert code == 1 and "not back within network.reconnect_s=3 s" in last, err[-2000:]
    assert "resume every party from its checkpoint of step" in last and "leader_step" in last, last
    assert "link to follower0 lost at step" in open(log).read()


def test_follower_given_another_followers_shard_is_refused(tmp_path, shards_three, procs):
    # Prepare: follower0's config points at follower1's shard directory
    cfgs = party_configs(str(tmp_path), str(shards_three), followers=("follower0", "follower1"))
    _edit(cfgs["follower0"], lambda d: d["data"].update({"path": os.path.join(str(shards_three), "follower1")}))
    # Execute
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("follower0", 60)
    # Assert
    assert code == 1 and "is the shard of party 'follower1', not of 'follower0'" in err and err.count("\n") == 1


def test_an_unexpected_error_reaches_the_followers_in_the_projects_words_and_the_log_keeps_the_detail(tmp_path):
    """eps = 1000 once died with "unexpected OverflowError: math range error" in the followers' ABORT; whatever a bug
    raises, its text (paths, values, state) stays in the leader's log."""
    # Prepare
    from vfl.cli import run_party
    from vfl.obs.metrics import RunLog

    sent = []

    def body():
        raise OverflowError("math range error at /home/leader/secret/thing, label 1")

    cfg = type("Cfg", (), {"party": "leader"})()
    # Execute
    code = run_party(cfg, RunLog(str(tmp_path / "leader.log")), body, sent.append)
    # Assert
    assert code == 1 and sent == ["leader stopped on an internal error; see its log"]
    log = (tmp_path / "leader.log").read_text()
    assert "OverflowError: math range error at /home/leader/secret/thing" in log


@pytest.mark.parametrize(
    "error, category",
    [
        (ValueError("could not convert '/home/leader/secret/data.tsv' column lr=0.37"), "an invalid value"),
        (RuntimeError("CUDA error at /home/leader/secret/model.pt, lr=0.37"), "a runtime error"),
        (FileNotFoundError(2, "No such file", "/home/leader/secret/ck.pt"), "a file it needs is missing"),
        (OSError(28, "No space left on device: /home/leader/secret"), "a file or system error"),
        (FloatingPointError("loss nan at /home/leader/secret, lr=0.37"), "a numerical error"),
    ],
    ids=["ValueError", "RuntimeError", "FileNotFoundError", "OSError", "FloatingPointError"],
)
def test_a_library_error_reaches_the_followers_as_a_category_and_the_log_keeps_its_text(tmp_path, error, category):
    """ValueError, RuntimeError, OSError and FloatingPointError texts (a library's or ours) can quote the leader's
    paths and config values: the followers get '<party> stopped: <category> (details in its log)'."""
    # Prepare
    from vfl.cli import run_party
    from vfl.obs.metrics import RunLog

    sent = []

    def body():
        raise error

    cfg = type("Cfg", (), {"party": "leader"})()
    # Execute
    code = run_party(cfg, RunLog(str(tmp_path / "leader.log")), body, sent.append)
    # Assert
    assert code == 1 and len(sent) == 1
    assert sent[0].startswith(f"leader stopped: {category}") and sent[0].endswith("(details in its log)")
    assert "/home/leader" not in sent[0] and "0.37" not in sent[0]
    assert "/home/leader/secret" in (tmp_path / "leader.log").read_text()


@pytest.mark.parametrize("kind", ["ConfigError", "DataError", "WireError", "PSIError"])
def test_the_projects_own_errors_reach_the_followers_in_their_own_words(tmp_path, kind):
    # Prepare
    from vfl.align.psi.protocol import PSIError
    from vfl.cli import run_party
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.obs.metrics import RunLog
    from vfl.wire import WireError

    cls = {"ConfigError": ConfigError, "DataError": DataError, "WireError": WireError, "PSIError": PSIError}[kind]
    sent = []

    def body():
        raise cls("follower0's train sample ids differ from the leader's")

    cfg = type("Cfg", (), {"party": "leader"})()
    # Execute
    code = run_party(cfg, RunLog(str(tmp_path / "leader.log")), body, sent.append)
    # Assert
    assert code == (2 if kind == "ConfigError" else 1)
    assert sent == ["leader: follower0's train sample ids differ from the leader's"]


@pytest.mark.parametrize(
    "error, told",
    [
        (ValueError("bad lr at /home/leader/secret"), "leader stopped: an invalid value (details in its log)"),
        (
            "budget",
            "leader: the leader's label-DP budget for this dataset is spent (details in the leader's log)",
        ),
    ],
    ids=["ValueError", "LabelDPBudgetError"],
)
def test_the_python_api_tells_the_peers_what_the_command_line_tells_them(
    tmp_path, shards_small, monkeypatch, error, told
):
    # Prepare: Leader.fit() whose body fails with a text that names the leader's paths or ledger
    import vfl.cli
    from privacy.label.ledger.store import LabelDPBudgetError
    from vfl_api import Leader

    if error == "budget":
        error = LabelDPBudgetError("label DP: ... to 9, over privacy.label_dp.budget 8; ledger /home/leader/ledger")
    sent = []

    def train(cfg, log, state):
        raise error

    monkeypatch.setattr(Leader, "_train", staticmethod(train))  # the role's entry function, as Leader holds it
    monkeypatch.setattr(vfl.cli, "abort_peers", lambda state, reason: sent.append(reason))
    cfgs = party_configs(str(tmp_path), str(shards_small))
    # Execute
    with pytest.raises(type(error)):
        Leader(cfgs["leader"]).fit()
    # Assert: the followers get the category or the project's words, never the paths (the caller keeps the exception)
    assert sent == [told]
