"""train.staleness K: the bounded-staleness schedule in memory (which batches start when, the bound of K + 1 in flight,
the drains at every pause, the age of every cut), weight stashing (a late gradient differentiates the weights that
computed its cut), the handshake and config refusals, and one real two-process run through the shipped WAN relay."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from tests.support.party_processes import party_configs
from vfl.training.staleness import InFlight, StalenessError, StalenessSchedule, pauses_after


class _Train:
    """The TrainConfig fields the schedule reads."""

    def __init__(self, eval_every_steps: int = 0, checkpoint_every: int = 0):
        self.eval_every_steps, self.checkpoint_every = eval_every_steps, checkpoint_every


def _simulate(k: int, epochs: int, spe: int, train: _Train) -> dict:
    """Run the leader's schedule over a whole run, with the message order the parties see (FORWARDs of a step, then
    its GRADIENT); return every batch's age (updates applied when its cut was computed), the most in flight, and
    the number in flight at each pause."""
    total = epochs * spe
    schedule = StalenessSchedule(k, spe, lambda e, i: pauses_after(train, spe, total, e * spe + i + 1, i))
    updates, age, at_pause = 0, {}, []
    for epoch in range(epochs):
        for i in range(spe):
            for batch in schedule.to_forward(epoch, i):
                schedule.window.forwarded(batch)
                age[batch] = updates
            schedule.window.applied((epoch, i))
            updates += 1
            if schedule.pause(epoch, i):
                at_pause.append(len(schedule.window))
    return {"age": age, "max": schedule.window.max_in_flight, "at_pause": at_pause}


@pytest.mark.parametrize("k", [0, 1, 2, 5])
def test_every_cut_comes_from_weights_at_most_k_updates_old_and_k_plus_one_fill_the_pipeline(k):
    # Prepare: 2 epochs of 23 steps, evaluation every 10 steps, a checkpoint every 7
    train = _Train(eval_every_steps=10, checkpoint_every=7)
    # Execute
    run = _simulate(k, 2, 23, train)
    # Assert: every batch trained once, each with a cut at most K updates old, K + 1 in flight at the most
    spe = 23
    assert sorted(run["age"]) == [(e, i) for e in range(2) for i in range(spe)]
    staleness = {b: b[0] * spe + b[1] - a for b, a in run["age"].items()}
    assert max(staleness.values()) == k and min(staleness.values()) == 0
    assert run["max"] == k + 1
    # the pipeline is empty at every pause (evaluation, checkpoint, epoch end): 7, 10, 14, 20, 23 (end) ...
    assert run["at_pause"] and set(run["at_pause"]) == {0}
    # a batch right after a pause is computed on the weights of the pause (no cut crosses it)
    assert staleness[(0, 10)] == 0 and staleness[(0, 14)] == 0 and staleness[(1, 0)] == 0


def test_k_zero_is_the_synchronous_step_forward_then_apply():
    # Prepare
    schedule = StalenessSchedule(0, 5, lambda e, i: i == 4)
    # Execute / Assert: one batch at a time, each forwarded just before it trains
    for i in range(5):
        assert schedule.to_forward(0, i) == [(0, i)]
        schedule.window.forwarded((0, i))
        schedule.window.applied((0, i))
    assert schedule.window.max_in_flight == 1


def test_the_horizon_never_crosses_a_pause_nor_an_epoch_end():
    # Prepare: K = 4, a pause after step 6 of a 9-step epoch
    schedule = StalenessSchedule(4, 9, lambda e, i: i in (6, 8))
    # Execute / Assert
    assert schedule.horizon(0, 0) == [(0, s) for s in range(5)]
    assert schedule.horizon(0, 4) == [(0, 4), (0, 5), (0, 6)]
    assert schedule.horizon(0, 7) == [(0, 7), (0, 8)]


def test_a_forward_beyond_k_plus_one_in_flight_is_refused_naming_the_bound():
    # Prepare: K = 2 and three batches in flight
    window = InFlight(2)
    for s in range(3):
        window.forwarded((0, s))
    # Execute / Assert
    with pytest.raises(
        StalenessError, match=r"step 3 while 3 batches are in flight .*train\.staleness=2 allows at most 3"
    ):
        window.forwarded((0, 3))
    assert len(window) == 3 and window.max_in_flight == 3


def test_gradients_must_return_in_forward_order_and_drains_are_checked():
    # Prepare
    window = InFlight(3)
    window.forwarded((0, 0))
    window.forwarded((0, 1))
    # Execute / Assert: step 1's gradient before step 0's is refused; a drain with batches in flight is refused
    with pytest.raises(StalenessError, match="GRADIENT for epoch 0 step 1, but epoch 0 step 0 is due"):
        window.applied((0, 1))
    with pytest.raises(StalenessError, match=r"an evaluation while 2 training batch\(es\) are in flight"):
        window.require_drained("an evaluation")
    window.applied((0, 0))
    window.applied((0, 1))
    window.require_drained("an evaluation")
    with pytest.raises(StalenessError, match="none is in flight"):
        window.applied((0, 2))


@pytest.mark.parametrize("bad", [-1, 17, 1.5, True, "2"])
def test_an_out_of_domain_staleness_is_refused_with_its_domain(bad):
    with pytest.raises(ValueError, match=r"train\.staleness must be an integer in \[0, 16\]"):
        InFlight(bad)


def test_pauses_follow_the_training_loops_cadence():
    # Prepare: 3 epochs of 10 steps; evaluation every 4 global steps, checkpoints every 6
    train, spe, total = _Train(eval_every_steps=4, checkpoint_every=6), 10, 30
    # Execute
    paused = [gs for gs in range(1, total + 1) if pauses_after(train, spe, total, gs, (gs - 1) % spe)]
    # Assert: multiples of 4 or 6, every epoch's end, the last step
    assert paused == sorted({g for g in range(1, 31) if g % 4 == 0 or g % 6 == 0 or g % 10 == 0})


# -- weight stashing --------------------------------------------------------------------------------------------


@pytest.fixture
def bottoms(tmp_path, shards_small):
    """Two fresh, identically seeded follower bottoms (mlp hidden layer: their backward reads dense weights)."""
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.training.party import BottomParty

    cfgs = party_configs(str(tmp_path), str(shards_small), model={"bottom": {"embedding_dim": 4, "hidden": [8]}})
    cfg = load_config(cfgs["follower0"])
    return [BottomParty(cfg, PartyShard(cfg.data.path), torch.device("cpu")) for _ in range(2)]


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone() for n, p in model.named_parameters()}


def test_one_batch_in_flight_gives_the_plain_forward_and_backward_bit_for_bit(bottoms):
    from vfl.training.weight_stash import WeightStash

    # Prepare: the same rows and gradient through a stash and through the party's own forward / backward
    stashed, plain = bottoms
    rows = np.arange(64)
    grad = torch.randn(64, stashed.cut_dim, generator=torch.Generator().manual_seed(0))
    stash = WeightStash(stashed)
    # Execute
    cut = stash.forward(rows)
    stash.backward(grad)
    want = plain.forward_train(rows)
    plain.accumulate_gradient(grad)
    # Assert: the same cut and the same gradient on every parameter, embedding tables included
    assert torch.equal(cut.detach(), want.detach())
    got, expected = _grads(stashed.model), _grads(plain.model)
    assert got.keys() == expected.keys() and all(torch.equal(got[n], expected[n]) for n in got)


def test_a_late_gradient_differentiates_the_weights_that_computed_its_cut(bottoms):
    """Batch B is forwarded, then batch A's gradient moves the weights; B's gradient, applied now, is the gradient at
    the weights B was forwarded with (weight stashing), not at the moved ones: the reference computes it on a copy
    that never moved."""
    from vfl.training.weight_stash import WeightStash

    # Prepare: A and B in flight on one party; the reference party forwards B on the same (unmoved) weights
    party, reference = bottoms
    gen = torch.Generator().manual_seed(1)
    a, b = np.arange(0, 64), np.arange(64, 128)
    grad_a, grad_b = torch.randn(64, party.cut_dim, generator=gen), torch.randn(64, party.cut_dim, generator=gen)
    stash = WeightStash(party)
    stash.forward(a)
    cut_b = stash.forward(b)
    want_cut = reference.forward_train(b)
    reference.accumulate_gradient(grad_b)
    # Execute: A's gradient applied (an optimizer step moves every weight in place), then B's
    stash.backward(grad_a)
    party.step_optimizer()
    moved = {n: p.detach().clone() for n, p in party.model.named_parameters()}
    stash.backward(grad_b)
    # Assert: B's cut came from the unmoved weights, and so does its gradient; the weights did move in between
    assert torch.equal(cut_b.detach(), want_cut.detach())
    got, expected = _grads(party.model), _grads(reference.model)
    assert all(torch.allclose(got[n], expected[n], rtol=1e-6, atol=1e-7) for n in expected)
    start = dict(reference.model.named_parameters())
    assert any(not torch.equal(moved[n], start[n].detach()) for n in moved)
    assert len(stash) == 0


# -- agreement and refusals ---------------------------------------------------------------------------------------


def test_the_handshake_refuses_a_follower_with_another_staleness_naming_both_values(tmp_path, shards_small):
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.session.handshake import hello_message, hello_problems

    # Prepare: a leader at K = 2, a follower at K = 0 (its HELLO leaves the field out, as today's)
    cfgs = party_configs(str(tmp_path), str(shards_small), leader_train={"staleness": 2})
    leader, follower = load_config(cfgs["leader"]), load_config(cfgs["follower0"])
    ours = hello_message(leader, PartyShard(leader.data.path))
    theirs = hello_message(follower, PartyShard(follower.data.path))
    # Execute
    problems = hello_problems("follower0", theirs, ours)
    # Assert: one problem, one line, both values
    assert theirs.staleness is None and "staleness" not in theirs.to_wire()[0]
    assert [p for p in problems if "staleness" in p] == [
        "follower0 has train.staleness=0 but the leader has train.staleness=2: set the same train.staleness on "
        "every party"
    ]


def test_hello_carries_staleness_and_refuses_it_out_of_domain():
    import dataclasses

    from tests.support.wire_samples import HELLO
    from vfl.wire.frames import WireError, decode, encode
    from vfl.wire.messages import parse

    # Prepare
    hello = dataclasses.replace(HELLO, party="f", staleness=3)

    def wire(meta: dict):
        return decode([bytes(memoryview(f)) for f in encode("HELLO", "f", "", 0, meta, [])], "f")

    meta, _ = hello.to_wire()
    # Execute / Assert: round trip, and a value beyond 16 refused by name
    assert parse(wire(meta)).staleness == 3
    with pytest.raises(WireError, match="staleness"):
        parse(wire({**meta, "staleness": 17}))


def test_config_takes_staleness_in_its_domain_and_refuses_it_with_microbatches(tmp_path):
    from vfl.config.schema import ConfigError, PartyConfig
    from vfl.wire.messages import MAX_STALENESS

    # Prepare
    base = {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:1"}, "data": {"path": "x"}}
    # Execute / Assert: the default is 0, the schema's bound is the wire's, out of domain and with micro-batches
    # refused in one line each
    assert PartyConfig.model_validate(base).train.staleness == 0
    assert (
        PartyConfig.model_json_schema()["$defs"]["TrainConfig"]["properties"]["staleness"]["maximum"] == MAX_STALENESS
    )
    from vfl.config.schema import load_config

    for train, needle in [
        ({"staleness": 17}, "train.staleness"),
        ({"staleness": 2, "microbatches": 2}, "train.staleness=2 needs train.microbatches 1, got train.microbatches=2"),
    ]:
        path = tmp_path / "f.yaml"
        path.write_text(yaml.safe_dump({**base, "train": train}))
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.")) as err:
            load_config(str(path))
        assert any("staleness" in line for line in str(err.value).splitlines())


def test_staleness_under_n_ranks_is_refused_in_one_line(tmp_path, shards_small):
    from vfl.cli import check_rank_options
    from vfl.config.schema import ConfigError, load_config

    # Prepare
    cfg = load_config(party_configs(str(tmp_path), str(shards_small), train={"staleness": 2})["leader"])
    # Execute / Assert: one rank runs it, N ranks are refused naming the value and what to set
    check_rank_options(cfg, distributed=False)
    with pytest.raises(ConfigError, match=r"^train\.staleness=2 needs --ranks 1; with N ranks use staleness: 0$"):
        check_rank_options(cfg, distributed=True)


# -- a real run ---------------------------------------------------------------------------------------------------


def test_a_two_process_run_through_a_wan_link_keeps_k_batches_ahead_and_converges(tmp_path, shards_small, procs):
    """K = 2 through the shipped relay (10 ms RTT): the follower counts 3 batches in flight at once (the one whose
    gradient it awaits and K = 2 more), the run evaluates, saves and snapshots mid-epoch (each a drain), and the model
    learns: test AUC above 0.70 on synth_small, whose synchronous runs reach ~0.75 (a floor well clear of the 0.5
    of a model that learned nothing, and of the seed-to-seed spread, ~0.01)."""
    from vfl.netlink.relay import LinkSpec, Relay
    from vfl.ports import free_port

    # Prepare: 2 epochs of batch 256, evaluation every 9 steps, a checkpoint every 5, early stopping's snapshots
    port = free_port()
    train = {"epochs": 2, "batch_size": 256, "staleness": 2, "eval_every_steps": 9, "checkpoint_every": 5}
    cfgs = party_configs(
        str(tmp_path), str(shards_small), port=port, train=train, leader_train={"early_stopping": {"patience": 100}}
    )
    # Execute: the follower reaches the leader through the relay
    with Relay(("127.0.0.1", port), LinkSpec(rtt_ms=10), seed=1) as relay:
        doc = yaml.safe_load(open(cfgs["follower0"]))
        doc["network"]["connect"] = relay.endpoint
        yaml.safe_dump(doc, open(cfgs["follower0"], "w"))
        procs.start("leader", "leader", cfgs["leader"])
        procs.start("follower0", "follower", cfgs["follower0"])
        for name in ("leader", "follower0"):
            code, _, err = procs.wait(name, timeout=300)
            assert code == 0, f"{name} failed: {err}"
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    breakdown = json.loads((out / "follower0_step_breakdown.json").read_text())
    rows = metrics["rows"]["train"]
    # Assert: K + 1 in flight at the follower, every step trained, drains at every pause, a model that learned
    assert breakdown["staleness"] == 2 and breakdown["max_in_flight"] == 3
    # the follower's steps end when their gradients are applied: its breakdown counts every step, parts within them
    assert breakdown["steps"] == metrics["steps"] and breakdown["parts_seconds"] <= 1.05 * breakdown["step_seconds"]
    assert metrics["staleness"] == 2 and metrics["steps"] == len(metrics["step_losses"]) == 2 * -(-rows // 256)
    assert len(metrics["history"]) >= 4  # evaluations at steps 9, 18, ... and each epoch's end
    assert (out / "checkpoints" / "follower0_step5.pt").exists() and (out / "checkpoints" / "leader_step5.pt").exists()
    assert metrics["test_auc"] > 0.70, metrics["test_auc"]


def test_two_followers_each_keep_k_plus_one_in_flight_and_the_leaders_inbox_takes_them(tmp_path, shards_three, procs):
    """Three parties at K = 3: while the leader awaits one follower's cut of batch t, the other's cuts of t .. t + 3
    may already be in, one socket's messages in arrival order, so the leader's inbox holds up to K + 1 per follower
    during a step (an inbox of one would refuse the second follower: "sent a message while 1 of its messages were
    unread"); both followers count 4 in flight, the run trains every step and learns (test AUC above 0.65, where a
    model that learned nothing scores 0.5)."""
    from tests.support.party_processes import run_split

    # Prepare: 2 epochs of batch 256 over three parties
    train = {"epochs": 2, "batch_size": 256, "staleness": 3, "log_every": 100}
    cfgs = party_configs(str(tmp_path), str(shards_three), followers=("follower0", "follower1"), train=train)
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert
    for f in ("follower0", "follower1"):
        breakdown = json.loads((tmp_path / "out" / f"{f}_step_breakdown.json").read_text())
        assert breakdown["staleness"] == 3 and breakdown["max_in_flight"] == 4, f
    assert metrics["staleness"] == 3 and metrics["steps"] == 2 * -(-metrics["rows"]["train"] // 256)
    assert metrics["test_auc"] > 0.65, metrics["test_auc"]


def test_a_run_resumed_from_a_mid_epoch_checkpoint_continues_exactly(tmp_path, shards_small, procs):
    """Checkpoints are pauses, so the pipeline is empty when one is written: a run resumed from the step-7
    checkpoint of a K = 2 run starts its pipeline from the same weights as the uninterrupted run did after step 7,
    and every later loss and the test AUC are the uninterrupted run's."""
    from tests.support.party_processes import run_split

    # Prepare: an uninterrupted 2-epoch K = 2 run with a checkpoint every 7 steps
    train = {"epochs": 2, "batch_size": 1024, "staleness": 2, "checkpoint_every": 7}
    for d in ("full", "resumed"):
        (tmp_path / d).mkdir()
    straight = run_split(procs, party_configs(str(tmp_path / "full"), str(shards_small), train=train))
    procs.cleanup()
    ckpts = tmp_path / "full/out/checkpoints"
    again = party_configs(str(tmp_path / "resumed"), str(shards_small), train=train)
    # Execute
    procs.start("leader", "leader", again["leader"], "--resume", str(ckpts / "leader_step7.pt"))
    procs.start("follower0", "follower", again["follower0"], "--resume", str(ckpts / "follower0_step7.pt"))
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, 300)
        assert code == 0, err
    resumed = json.loads((tmp_path / "resumed/out/metrics.json").read_text())
    # Assert: the losses after step 7 and the final AUC are the uninterrupted run's
    assert straight["steps"] > 7 and resumed["steps"] == straight["steps"]
    np.testing.assert_allclose(resumed["step_losses"][7:], straight["step_losses"][7:], rtol=1e-5)
    assert resumed["test_auc"] == pytest.approx(straight["test_auc"], abs=1e-6)
