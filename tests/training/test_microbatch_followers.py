"""train.microbatches with two followers: each sends a step's M embeddings before its first gradient, so the leader's
inbox holds up to M unread messages per follower during a step (and one otherwise); a party beyond that is refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.party_processes import free_port, party_configs, party_keys, run_centralized, run_split
from vfl.training.microbatch import pipelined
from vfl.wire import FollowerChannel, LeaderChannel, WireError
from vfl.wire.curve_keys import load_follower_keys, load_leader_keys
from vfl.wire.endpoint import PeerTimeout

RUN = "run-micro"


@pytest.fixture
def trio(tmp_path):
    """A leader channel admitting f0 and f1, and both followers' channels, connected over tcp."""
    keys = party_keys(str(tmp_path), ("leader", "f0", "f1"))
    port = free_port()
    lk = load_leader_keys(keys["leader"][1], {f: keys[f][0] for f in ("f0", "f1")})
    leader = LeaderChannel(f"tcp://127.0.0.1:{port}", ("f0", "f1"), lk, 1.0, "leader", RUN)
    followers = {}
    for f in ("f0", "f1"):
        followers[f] = FollowerChannel(
            f"tcp://127.0.0.1:{port}", f, load_follower_keys(keys[f][1], keys["leader"][0]), 5.0
        )
        followers[f].run = RUN
    yield leader, followers
    for ch in followers.values():
        ch.close()
    leader.close()


def _send_embeddings(follower: FollowerChannel, n: int) -> None:
    for j in range(n):
        follower.send("EMBEDDING", {"micro": j}, [np.full((2, 2), j, np.float32)])


def test_inbox_holds_the_pipelined_depth_per_party_in_order(trio):
    # Prepare: f1 sends a step's 3 embeddings while the leader waits on f0 (which sends nothing)
    leader, followers = trio
    _send_embeddings(followers["f1"], 3)
    # Execute: the wait on f0 files all of f1's messages, then reaches its deadline
    with pipelined(leader, 3):
        with pytest.raises(PeerTimeout, match="awaiting EMBEDDING from f0"):
            leader.recv("f0", "EMBEDDING")
        got = [leader.recv("f1", "EMBEDDING") for _ in range(3)]
    # Assert: nothing refused; f1's messages come out in the order sent; the depth is back to one
    assert [m.meta["micro"] for m in got] == [0, 1, 2]
    assert [float(m.tensors[0][0, 0]) for m in got] == [0.0, 1.0, 2.0]
    assert leader.ahead == 1


@pytest.mark.parametrize("depth, sent", [(1, 2), (3, 4)], ids=["one-ahead", "pipelined-3"])
def test_a_party_beyond_the_allowed_depth_is_refused_by_name(trio, depth, sent):
    # Prepare: f1 sends one message more than the depth the leader allows
    leader, followers = trio
    _send_embeddings(followers["f1"], sent)
    # Execute / Assert: the wait on f0 refuses f1, naming it and the depth
    with pipelined(leader, depth):
        with pytest.raises(WireError, match=f"f1 sent a message while {depth} of its messages were unread") as err:
            leader.recv("f0", "EMBEDDING")
    assert not isinstance(err.value, PeerTimeout) and err.value.peer == "f1"
    assert f"at most {depth} message" in str(err.value)


def test_a_message_queued_ahead_may_hold_one_micro_batch_embedding_and_no_more(trio):
    """A follower may queue M messages during a step, but each one behind another is bounded by one micro-batch's
    embedding: it cannot pin M messages of the channel's full size (up to 1 GiB each) at the leader."""
    from vfl.training.microbatch import embedding_bytes_bound

    # Prepare: the bound for 2-row micro-batches of a 2-wide cut; f1 sends one embedding of that size, then one
    # 4,000 times larger, while the leader waits on f0
    leader, followers = trio
    bound = embedding_bytes_bound(2, [2])
    assert bound == 2 * 2 * 4 + 65_536
    followers["f1"].send("EMBEDDING", {"micro": 0}, [np.zeros((2, 2), np.float32)])
    followers["f1"].send("EMBEDDING", {"micro": 1}, [np.zeros((8000, 2 * 4), np.float32)])
    # Execute / Assert: the wait on f0 refuses f1 by name, the size and the bound in the line
    with pipelined(leader, 3, bound):
        with pytest.raises(WireError, match="f1 sent a message of [0-9]+ bytes ahead of its turn") as err:
            leader.recv("f0", "EMBEDDING")
    assert err.value.peer == "f1" and f"at most {bound} bytes" in str(err.value)
    assert leader.ahead == 1 and leader.ahead_bytes is None


def test_pipelined_refuses_a_depth_below_one_and_restores_on_error(trio):
    # Prepare
    leader, _ = trio
    # Execute / Assert
    with pytest.raises(ValueError, match="at least 1"):
        with pipelined(leader, 0):
            pass
    with pytest.raises(RuntimeError):
        with pipelined(leader, 4):
            assert leader.ahead == 4
            raise RuntimeError("a failed step")
    assert leader.ahead == 1


@pytest.mark.slow  # micro-batches split == centralized run by default in test_compute_options, two followers in
# test_split_training; this pairs them over real processes
def test_two_followers_with_microbatches_train_split_equal_to_centralized(tmp_path, shards_three, procs):
    # Prepare: leader + 2 followers over tcp, 3 micro-batches per step, 10 steps (batch 1024 of 9.6k rows);
    # follower1 on the mlp bottom, so that every built-in runs micro-batches (deepfm and dcn_v2:
    # tests/models/test_models_split.py)
    train = {"batch_size": 1024, "microbatches": 3, "log_every": 100}
    bottoms = {"follower1": {"name": "mlp", "embedding_dim": 4, "hidden": [16], "cut_dim": 3}}
    cfgs = party_configs(
        str(tmp_path), str(shards_three), followers=("follower0", "follower1"), train=train, bottoms=bottoms
    )
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the same micro-batches in the same order: the very same float32 losses
    assert split["cut_dims"]["follower1"] == 3  # its own bottom (wide_deep's cut is 2)
    assert split["microbatches"] == 3 and split["steps"] >= 9
    assert split["step_losses"] == central["step_losses"]
