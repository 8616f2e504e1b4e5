"""The leader's CurveZMQ channel to its followers, for training and prediction: bound, sized, announced."""

from __future__ import annotations


def listen(cfg, env, keys, n_ids: int, log):
    """The leader's CurveZMQ channel, its messages capped at what an admitted follower may send."""
    from vfl.align.psi.protocol import MAX_PSI_MESSAGE_BYTES
    from vfl.distributed.pairing import rank_endpoint
    from vfl.wire import LeaderChannel
    from vfl.wire.frames import MAX_HEADER_BYTES
    from vfl.wire.messages import MAX_CUT_DIM

    bind = rank_endpoint(cfg.network.bind, env.rank, env.ranks)
    # the largest message a follower may send: an embedding of the largest batch at the widest cut, or a PSI chunk
    max_message = max(
        max(cfg.train.batch_size, cfg.train.eval_batch_size) * MAX_CUT_DIM * 4 + MAX_HEADER_BYTES, MAX_PSI_MESSAGE_BYTES
    )
    channel = LeaderChannel(
        bind,
        cfg.network.followers,
        keys,
        cfg.network.timeout_s,
        cfg.party,
        max_message_bytes=max_message,
        notice=log,
    )
    log(
        f"leader {cfg.party}: listening on {bind} (CurveZMQ), waiting for {list(cfg.network.followers)}; "
        + f"private set intersection of {n_ids} ids"
        + (f" (this rank: bucket {env.rank} of {env.ranks})" if env.distributed else "")
    )
    return channel
