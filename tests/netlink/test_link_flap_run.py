"""A run that survives a link flap: leader and follower as real processes over tcp, the follower connected through
the shipped relay, every connection reset in the middle of a message halfway through training and refused for a
while; both parties wait (network.reconnect_s), resynchronise and re-send what was in flight, and without label or
embedding DP at staleness 0 the final weights are the uninterrupted run's, bit for bit."""

from __future__ import annotations

import json
import os

import pytest
import torch
import yaml

from tests.support.party_processes import party_configs
from vfl.netlink.relay import Relay
from vfl.training.checkpoint import load_checkpoint

TRAIN = {"epochs": 2, "batch_size": 256, "eval_every_steps": 6, "eval_batch_size": 512}


@pytest.fixture(scope="module")
def shards_flap(synth_tiny, tmp_path_factory):
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    out = tmp_path_factory.mktemp("flap") / "shards"
    prepare(str(synth_tiny), str(out), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    return out


def _run(procs, tmp, shards, drop_at_down_bytes: int | None, schedule: dict) -> tuple[dict, Relay, dict]:
    """Both parties through a relay (a drop after `drop_at_down_bytes` bytes towards the follower, then 0.5 s without
    connections); the leader's metrics.json, the relay, and each party's final weights."""
    # fresh keys: both runs carry a full PSI, so the clean run's bytes place the drop inside the flap run's training
    cfgs = party_configs(str(tmp), str(shards), train={**TRAIN, **schedule}, fresh_keys=True)
    port = int(yaml.safe_load(open(cfgs["leader"]).read())["network"]["bind"].rsplit(":", 1)[1])
    relay = Relay(("127.0.0.1", port)).start()
    if drop_at_down_bytes is not None:
        relay.drop_after(down_bytes=drop_at_down_bytes, down_s=0.5)
    try:
        procs.start("leader", "leader", cfgs["leader"])
        procs.start("follower0", "follower", cfgs["follower0"], f"network.connect={relay.endpoint}")
        for name in ("leader", "follower0"):
            code, _, err = procs.wait(name, timeout=120)
            assert code == 0, f"{name} failed: {err[-3000:]}"
    finally:
        relay.close()
    out = os.path.join(tmp, "out")
    weights = {
        p: load_checkpoint(os.path.join(out, "checkpoints", f"{p}_final.pt"))["state"] for p in ("leader", "follower0")
    }
    return json.loads(open(os.path.join(out, "metrics.json")).read()), relay, weights


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize(
    "schedule",
    [
        {},
        pytest.param({"staleness": 1}, marks=pytest.mark.slow, id="staleness1"),
        pytest.param({"microbatches": 2}, marks=pytest.mark.slow, id="microbatches2"),
    ],
)
def test_a_link_flap_in_the_middle_of_training_costs_a_wait_and_leaves_the_model_bit_identical(
    tmp_path, shards_flap, procs, schedule
):
    """The relay resets both connections inside a message halfway through the training bytes towards the follower
    and refuses connections for 0.5 s: the follower reconnects with the same key, both sides agree on the steps and
    re-send what was lost; both exit 0, both logs say the link was lost and came back, and every party's final
    weights equal the uninterrupted run's (no DP, staleness 0)."""
    # Prepare: the uninterrupted run, through the same relay
    clean, clean_relay, clean_weights = _run(procs, tmp_path / "clean", shards_flap, None, schedule)
    procs.cleanup()
    procs.procs.clear()
    training_down = clean["wire"]["bytes_from_leader"]  # after PSI: the steps, evaluations and the goodbye
    drop_at = clean_relay.bytes_down - training_down // 2  # about halfway through training, inside a message
    # Execute
    flap, relay, weights = _run(procs, tmp_path / "flap", shards_flap, drop_at, schedule)
    # Assert: one drop, one reconnection, the same model
    assert relay.drops == 1 and relay.connections == clean_relay.connections + 1
    for party in ("leader", "follower0"):
        log = open(os.path.join(tmp_path, "flap", "out", f"{party}.log")).read()
        peer = "follower0" if party == "leader" else "leader"
        assert f"link to {peer} lost at step" in log and f"link to {peer} back after" in log, log[-2000:]
        assert _same(weights[party], clean_weights[party]), f"{party}'s final weights differ after the flap"
    assert flap["test_auc"] == clean["test_auc"]
