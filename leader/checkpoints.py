"""The leader's checkpoints: resuming from one (same release, same cadence), writing one on SAVE, the final one."""

from __future__ import annotations

import os

from vfl.preflight import resume_identity
from vfl.runs.record import run_record
from vfl.session.rejoin import AUTO_CHECKPOINT_S
from vfl.training.checkpoint import load_resume_checkpoint, save_checkpoint
from vfl.training.checkpoint_format import MODEL_CONFIG_KEY
from vfl.training.trained_model import model_record
from vfl.wire.messages import Bye, Done, Save


def load_resume(cfg, party) -> dict | None:
    """train.resume_from: the checkpoint to resume (its bottom loaded into `party` at once), else None."""
    if not cfg.train.resume_from:
        return None
    resume = load_resume_checkpoint(cfg.train.resume_from, cfg.party, ("bottom", "top"))
    party.load_state(resume["state"]["bottom"], resume=True)
    return resume


def check_resume_release(resume: dict | None, release: str | None, resume_from: str | None) -> None:
    """A resumed run must train on the very release its checkpoint was trained on."""
    if not resume:
        return
    saved = (resume.get("extra") or {}).get("label_dp_release")
    if saved != release:
        raise ValueError(
            f"train.resume_from {resume_from!r} was trained on label-DP release {saved!r}, "
            f"but this run's labels are release {release!r} (another key, eps, mechanism or prior); "
            "resuming would mix two releases of the same labels: start a fresh run instead"
        )


def resume_training(trainer) -> None:
    """prepare()'s part of a resume: the top and the loop from the checkpoint's state."""
    cfg, loop = trainer.cfg, trainer.loop
    if trainer.resume:
        trainer.top.load_state(trainer.resume["state"]["top"], resume=True)
        loop.load_state((trainer.resume.get("extra") or {}).get("loop") or {})
        trainer.log(f"resumed from {cfg.train.resume_from} at global step {trainer.start_step}")


def auto_checkpoints(trainer) -> None:
    """--resume auto without train.checkpoint_every: a checkpoint about every AUTO_CHECKPOINT_S seconds."""
    if trainer.rejoin_auto and not trainer.cfg.train.checkpoint_every:  # about a minute of training lost at most
        trainer.loop.checkpoint_seconds = AUTO_CHECKPOINT_S
        trainer.log(
            f"--resume auto: train.checkpoint_every unset, so a checkpoint after each step that ends "
            f"{AUTO_CHECKPOINT_S:g} s or more after the last one (at evaluations and epoch ends under staleness)"
        )


def checkpoint(trainer, epoch: int, step: int, tag: str) -> str:
    """SAVE to every follower, then this party's bottom, top and loop as OUT/checkpoints/<party>_<tag>.pt."""
    cfg, party = trainer.cfg, trainer.party
    for f in trainer.followers:
        trainer.ch.post(f, Save(tag=tag, epoch=epoch, step=step))
    path = os.path.join(trainer.out_dir, "checkpoints", f"{cfg.party}_{tag}.pt")
    if not trainer.ctx.is_main:  # every rank holds the same weights: rank 0 writes the party's checkpoint
        return path
    state = {"bottom": party.state(), "top": trainer.top.state()}
    labels = trainer.labels
    extra = {
        "label_dp_release": labels.release,
        "label_dp_key": labels.report["key_fingerprint"] if labels.report else None,
        "loop": trainer.loop.state(),
        "cut_dims": {cfg.party: party.cut_dim, **trainer.cut_dims},  # the top's inputs, leader first
        MODEL_CONFIG_KEY: model_record(cfg, party.bottom_config),  # the model as built: what predict and resume build
        # the training run, the step whose weights these are, parties, keys: prediction's fingerprint
        "run": run_record(
            cfg,
            trainer.ch.run,
            step if trainer.restored_step is None else trainer.restored_step,
            {cfg.party: party.cut_dim, **trainer.cut_dims},
            trainer.key_fingerprints,
        ),
    }
    save_checkpoint(path, cfg.party, state, epoch, step, extra, resume_identity(cfg))
    trainer.last_checkpoint = (step, path)
    return path


def finish(trainer, epoch: int, step: int) -> None:
    """The final checkpoint, DONE to every follower, and each one's BYE (its snapshot's bytes)."""
    checkpoint(trainer, epoch, step, "final")
    for f in trainer.followers:
        trainer.ch.post(f, Done(epoch=epoch, step=step))
    trainer.ch.watch_disconnect = False  # followers leave once they said BYE
    for f in trainer.followers:
        bye: Bye = trainer.ch.expect(f, Bye)
        trainer.follower_snapshot_bytes[f] = bye.snapshot_bytes
