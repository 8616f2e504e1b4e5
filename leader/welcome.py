"""The leader's handshake: HELLO checked, the links timed, train.staleness auto chosen, --resume auto agreed, WELCOME."""

from __future__ import annotations

import math

from vfl.data.shards import batch_order, steps_per_epoch
from vfl.distributed.pairing import rank_meta, rank_problems
from vfl.session.handshake import hello_message, hello_problems
from vfl.session.link_probe import LinkCheckDone, announce, check_report
from vfl.session.rejoin import common_start, disagreement_line
from vfl.training.sends_per_row import sends_per_row
from vfl.training.staleness_auto import STEP_FACTOR, choose_staleness, time_bottom_step
from vfl.wire.messages import Hello, Welcome
from vfl.wire.resync import RejoinRequested


def handshake(trainer, check_link: bool = False) -> None:
    """Greet `trainer`'s followers, time each link, and welcome them to the run; check_link: measure each link's
    bandwidth too, log what it calls for and raise LinkCheckDone (the followers are told to stop)."""
    cfg, session = trainer.cfg, trainer.session

    def ours(hello: Hello) -> Hello:  # the leader's view, its id digests keyed by this follower's nonce
        step = hello.resume_step if trainer.rejoin_auto else trainer.start_step  # --resume auto: agreed below
        return hello_message(cfg, trainer.party.shard, step, hello.nonce)

    hellos: dict[str, Hello] = session.greet(
        Hello,
        lambda f, hello: hello_problems(f, hello, ours(hello)) + rank_problems(f, hello, trainer.ctx.env),
        lambda f: f"HELLO from follower {f} (is it running and pointed at {cfg.network.bind}?)",
    )
    if trainer.rejoin_auto:
        agree_on_start(trainer, {f: h.resume_step for f, h in hellos.items()})
    tr = cfg.train
    fixed = 0 if tr.staleness == "auto" else tr.staleness  # auto: the warning speaks of the synchronous step
    if trainer.ctx.env.is_main:
        announce(session.links, tr.batch_size, fixed, trainer.log)
    if check_link:
        for f, link in session.check_links().items():
            trainer.log(check_report(f, link, session.cut_dims[f], tr.batch_size, fixed))
        raise LinkCheckDone("link check only (--check-link): the followers were told, nothing was trained")
    steps = steps_per_epoch(len(trainer.party.train_split), tr.batch_size)
    if tr.staleness == "auto":
        choose_staleness_auto(trainer, steps)
    cfg = trainer.cfg  # auto: the K chosen
    session.start_run(
        {f: h.nonce for f, h in hellos.items()},
        lambda f: Welcome(
            run=trainer.ch.run,
            nonce=hellos[f].nonce,
            epochs=cfg.train.epochs,
            steps_per_epoch=steps,
            **welcome_sends(trainer, steps),
            **rank_meta(trainer.ctx.env),
            staleness=cfg.train.staleness or None,
        ),
    )
    # network.reconnect_s: from here a lost follower is waited for and resynchronised (vfl/wire/resync.py)
    trainer.exchange.steps_per_epoch = steps
    trainer.ch.resync.reconnect_s = cfg.network.reconnect_s
    trainer.ch.resync.resume_hint = lambda: resume_hint(trainer.last_checkpoint)
    trainer.ch.while_waiting = session.keepalive  # the other followers' deadlines while one is waited for


def choose_staleness_auto(trainer, steps: int) -> None:
    """train.staleness auto: K from the slowest follower's measured round trip, this party's step time and the
    run's length (vfl/training/staleness_auto.py), logged with its reasons and cost; the welcome names it. Sets
    `trainer.staleness_choice` and the K in `trainer.cfg`."""
    tr, session = trainer.cfg.train, trainer.session
    rows = batch_order(len(trainer.party.train_split), tr.batch_size, tr.seed, 0)[0]
    step_s = time_bottom_step(trainer.party, tr, rows, keepalive=session.keepalive) * STEP_FACTOR
    slowest = max(session.links.values(), key=lambda link: link.rtt_s)
    known = [x for link in session.links.values() for x in (link.down, link.up) if x is not None]
    cut = 4.0 * max(trainer.cut_dims.values())  # float32 bytes a sample each way
    total = tr.epochs * steps
    segment = min(steps, tr.eval_every_steps or steps, tr.checkpoint_every or steps)
    trainer.staleness_choice = choose_staleness(
        slowest.rtt_s, step_s, tr.batch_size, total - trainer.start_step, segment, min(known, default=math.inf),
        cut, cut,
    )  # fmt: skip
    trainer.log(trainer.staleness_choice.describe())
    trainer.cfg = trainer.cfg.model_copy(
        update={"train": tr.model_copy(update={"staleness": trainer.staleness_choice.staleness})}
    )


def agree_on_start(trainer, theirs: dict[str, int]) -> None:
    """--resume auto: every party resumes from the same step, or all start again from the smallest (REJOIN)."""
    steps = {trainer.cfg.party: trainer.start_step, **theirs}
    common = common_start(steps)
    if common is None:
        return
    trainer.log(disagreement_line(steps, common))
    trainer.ch.rejoin_all(common)
    raise RejoinRequested(common)


def resume_hint(last_checkpoint: tuple[int, str] | None) -> str:
    """What a run that cannot go on resumes from (the line a party prints when a lost peer does not come back)."""
    if last_checkpoint is None:
        return "no checkpoint was written yet (train.checkpoint_every): start the run again"
    step, path = last_checkpoint
    return (
        f"resume every party from its checkpoint of step {step} (this party's: {path}; --resume PATH with the "
        "same --epochs)"
    )


def welcome_sends(trainer, steps: int) -> dict[str, int]:
    """WELCOME's sends per row of each split from the start step to the run's end (the followers' embedding DP
    calibrates for them: vfl/training/sends_per_row.py)."""
    tr, rel = trainer.cfg.train, trainer.release
    all_party_prior = trainer.task.kind == "multiclass" and rel is not None and rel.uses_prior  # as prepare()'s
    sends = sends_per_row(
        tr.epochs, steps, tr.eval_every_steps, trainer.start_step, restores=tr.early_stopping is not None,
        prior_epochs=rel.prior_epochs if all_party_prior else 0,
    )  # fmt: skip
    return {f"sends_{split}": count for split, count in sends.items()}
