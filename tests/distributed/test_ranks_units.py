"""The pieces of N ranks per party that need no process group: torchrun's environment, slices, weights, pairing."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vfl.distributed.launch import LaunchError, RankEnv, rank_env
from vfl.distributed.pairing import rank_endpoint, rank_meta, rank_problems
from vfl.distributed.slicing import check_batches, loss_weight, rank_rows, slice_bounds
from vfl.wire import WireError

TORCHRUN = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_one_rank_without_torchrun_and_its_log_names():
    # Execute / Assert: no variables, or WORLD_SIZE=1, is the single-process path
    assert rank_env({}) == RankEnv() and rank_env({"WORLD_SIZE": "1"}) == RankEnv()
    assert not RankEnv().distributed and RankEnv().log_name("leader") == "leader.log"
    env = rank_env(TORCHRUN)
    assert (env.rank, env.ranks, env.local_rank, env.local_ranks) == (1, 2, 1, 2)
    assert env.log_name("leader") == "leader.rank1.log"


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"RANK": "2"}, "RANK=2 is outside [0, 1]"),
        ({"RANK": "x"}, "not an integer"),
        ({"MASTER_PORT": ""}, "MASTER_PORT is not set"),
        ({"RANK": None}, "RANK is not set"),
    ],
)
def test_bad_torchrun_environment_is_named(change, needle):
    # Prepare
    env = {k: v for k, v in {**TORCHRUN, **change}.items() if v is not None}
    # Execute / Assert
    with pytest.raises(LaunchError, match=re.escape(needle)):
        rank_env(env)


def test_slices_cover_the_batch_and_weights_give_the_global_mean():
    # Prepare: a batch of 511 rows over 2 and 3 ranks, per-row losses
    rng = np.random.default_rng(0)
    rows = rng.permutation(10_000)[:511]
    losses = rng.random(10_000)
    for n in (1, 2, 3):
        # Execute
        parts = [rank_rows(rows, r, n) for r in range(n)]
        weighted = [loss_weight(len(p), len(rows), n) * losses[p].mean() for p in parts]
        # Assert: the slices partition the batch in order; DDP's average of the weighted means is the global mean
        np.testing.assert_array_equal(np.concatenate(parts), rows)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        assert np.mean(weighted) == pytest.approx(losses[rows].mean(), rel=1e-12)
    assert [slice_bounds(5, r, 2) for r in range(2)] == [(0, 3), (3, 5)]


def test_a_global_batch_smaller_than_the_ranks_is_refused():
    # Execute / Assert: 1001 rows at batch 500 leave a last batch of 1 row
    check_batches(1001, 500, 1)
    with pytest.raises(
        ValueError, match=re.escape("last batch of an epoch of 1001 training rows at train.batch_size=500 has 1")
    ):
        check_batches(1001, 500, 2)


def test_each_rank_has_its_port_and_the_handshake_checks_n_and_the_pairing():
    # Prepare
    leader = RankEnv(1, 2, 1, 2)
    # Execute / Assert
    assert rank_endpoint("tcp://10.0.0.1:5560", 1, 2) == "tcp://10.0.0.1:5561"
    assert rank_endpoint("tcp://10.0.0.1:5560", 0, 1) == "tcp://10.0.0.1:5560"
    assert rank_endpoint("tcp://a:1", 1, 2, ("tcp://a:1", "tcp://b:7")) == "tcp://b:7"
    with pytest.raises(ValueError, match="above 65535"):
        rank_endpoint("tcp://h:65535", 0, 2)
    assert rank_meta(RankEnv()) == {}  # one rank: HELLO and WELCOME are unchanged
    assert rank_problems("follower0", _welcome(rank=1, ranks=2), leader) == []
    assert "runs 1 rank(s) but the leader runs 2" in rank_problems("follower0", _welcome(), leader)[0]
    assert "rank 0 reached rank 1" in rank_problems("follower0", _welcome(rank=0, ranks=2), leader)[0]
    with pytest.raises(WireError, match="field 'rank' must be an integer"):  # the type is the message's to check
        _welcome(rank=True, ranks=2, parse=True)


def _welcome(parse: bool = False, **ranks):
    """A WELCOME with these rank fields; parse: as the receiver sees it (checked field by field)."""
    from vfl.wire.frames import Message
    from vfl.wire.messages import Welcome

    meta = {
        "run": "r" * 32,
        "nonce": "0" * 32,
        "epochs": 1,
        "steps_per_epoch": 3,
        "sends_train": 1,
        "sends_valid": 1,
        "sends_test": 1,
        **ranks,
    }
    return Welcome.from_wire(Message("WELCOME", "leader", "", 0, meta)) if parse else Welcome(**meta)


def test_one_rank_context_starts_no_process_group():
    # Prepare
    import torch
    import torch.distributed as dist

    from vfl.config.schema import parse_config
    from vfl.distributed.context import RankContext, start_ranks

    cfg = parse_config(
        {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:5000"}, "data": {"path": "x"}}
    )
    # Execute
    ctx = start_ranks(cfg, RankEnv(), torch.device("cpu"))
    # Assert
    assert type(ctx) is RankContext and not dist.is_initialized()
    rows = np.arange(7)
    assert ctx.rows(rows) is rows and ctx.global_loss(0.5, 7, 7) == 0.5 and ctx.eval_range(9) == (0, 9)
    module = torch.nn.Linear(2, 1)
    assert ctx.wrap(module) is module


def test_only_backend_failures_become_rank_lost():
    # Prepare
    from vfl.distributed.context import _is_distributed_error
    from vfl.wire.endpoint import PeerTimeout

    # Execute / Assert: a wire deadline keeps its own message; gloo's errors are recognised
    assert not _is_distributed_error(PeerTimeout("timed out after 10 s awaiting EMBEDDING from follower0"))
    assert _is_distributed_error(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"))
    assert not _is_distributed_error(RuntimeError("gradient received with no forward pass pending"))
