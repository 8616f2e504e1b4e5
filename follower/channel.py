"""A follower's CurveZMQ channel to the leader, for training and prediction: connected, sized, announced."""

from __future__ import annotations


def connect(cfg, env, keys, n_ids: int, log):
    """The follower's CurveZMQ channel to the leader, its messages capped at what the leader may send."""
    from vfl.align.psi.protocol import MAX_PSI_MESSAGE_BYTES
    from vfl.distributed.pairing import rank_endpoint
    from vfl.wire import FollowerChannel
    from vfl.wire.frames import MAX_HEADER_BYTES

    # the largest message the leader may send: the gradient of one training batch at this party's cut, or a PSI chunk
    max_message = max(
        cfg.train.batch_size * cfg.model.bottom.cut_dim * 4 + MAX_HEADER_BYTES + 1024, MAX_PSI_MESSAGE_BYTES
    )
    connect = rank_endpoint(cfg.network.connect, env.rank, env.ranks, cfg.network.rank_endpoints)
    channel = FollowerChannel(
        connect, cfg.party, keys, cfg.network.timeout_s, max_message_bytes=max_message, notice=log
    )
    log(
        f"follower {cfg.party}: connecting to {connect}; "
        + f"private set intersection of {n_ids} ids"
        + (f" (this rank: bucket {env.rank} of {env.ranks})" if env.distributed else "")
    )
    return channel
