"""What the follower writes: its checkpoints (resumed from, SAVE, DONE), its step breakdown, recorded gradients."""

from __future__ import annotations

import errno
import json
import os

import numpy as np

from privacy.durable_files import replacing_file
from vfl.preflight import resume_identity
from vfl.runs.record import run_record
from vfl.training.checkpoint import load_resume_checkpoint, save_checkpoint
from vfl.training.checkpoint_format import MODEL_CONFIG_KEY
from vfl.training.step_timer import TIMER
from vfl.training.trained_model import model_record


class GradientRecorder:
    """debug.record_gradients: keep every received gradient with its sample ids, written as .npz at the end."""

    def __init__(self, path: str):
        self.path = path
        self.ids: list[np.ndarray] = []
        self.epochs: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []

    def add(self, epoch: int, step: int, ids: np.ndarray, grad: np.ndarray) -> None:
        self.ids.append(np.asarray(ids, np.int64).copy())
        self.epochs.append(np.full(len(ids), epoch, np.int32))
        self.steps.append(np.full(len(ids), step, np.int32))
        self.grads.append(np.asarray(grad, np.float32).copy())

    def save(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)) or ".", exist_ok=True)
        try:
            with replacing_file(self.path) as f:  # a file object: np.savez adds no .npz to it
                np.savez(
                    f,
                    ids=np.concatenate(self.ids),
                    epoch=np.concatenate(self.epochs),
                    step=np.concatenate(self.steps),
                    grad=np.concatenate(self.grads),
                )
        except OSError as e:
            where = os.path.dirname(os.path.abspath(self.path))
            raise OSError(
                f"no space left on {where}: {self.path} not written"
                if e.errno == errno.ENOSPC
                else f"cannot write {self.path}: {e.strerror or e}"
            ) from None


def load_resume(trainer) -> None:
    """train.resume_from: the bottom loaded, the start step and embedding DP's lineage from the checkpoint."""
    cfg = trainer.cfg
    if not cfg.train.resume_from:
        return
    ckpt = load_resume_checkpoint(cfg.train.resume_from, cfg.party, ("bottom",))
    trainer.party.load_state(ckpt["state"]["bottom"], resume=True)
    trainer.start_step = ckpt["step"]
    trainer.lineage = (ckpt.get("extra") or {}).get("embedding_dp_lineage")


def resume_hint(last_checkpoint: tuple[int, str] | None) -> str:
    """What a run that cannot go on resumes from (the line this party prints when the leader does not come back)."""
    if last_checkpoint is None:
        return "no checkpoint was written yet (train.checkpoint_every): start the run again"
    step, path = last_checkpoint
    return f"resume from the checkpoint of step {step} (this party's: {path}; --resume PATH)"


def save(trainer, tag: str, epoch: int, step: int) -> None:
    """OUT/checkpoints/<party>_<tag>.pt: this party's bottom, the run's record, the model as built and embedding DP's
    lineage."""
    if not trainer.ctx.is_main:  # every rank holds the same weights: rank 0 writes the party's checkpoint
        return
    cfg, party = trainer.cfg, trainer.party
    path = os.path.join(trainer.out_dir, "checkpoints", f"{cfg.party}_{tag}.pt")
    # the training run, the step whose weights these are, the keys: prediction's fingerprint
    model_step = step if trainer.restored_step is None else trainer.restored_step
    record = run_record(cfg, trainer.ch.run, model_step, {cfg.party: party.cut_dim}, trainer.key_fingerprints)
    state = {"bottom": party.state()}
    extra = {"run": record, "embedding_dp_lineage": trainer.lineage or trainer.ch.run}
    extra[MODEL_CONFIG_KEY] = model_record(cfg, party.bottom_config)  # as built: what predict and resume build
    save_checkpoint(path, cfg.party, state, epoch, step, extra, resume_identity(cfg))
    trainer.last_checkpoint = (step, path)


def save_breakdown(trainer) -> None:
    """OUT/<party>_step_breakdown.json: where this party's training steps spent their time."""
    cfg, in_flight = trainer.cfg, trainer.in_flight
    os.makedirs(trainer.out_dir, exist_ok=True)
    path = os.path.join(trainer.out_dir, f"{cfg.party}_step_breakdown.json")
    with replacing_file(path, text=True) as f:
        json.dump(
            {
                "party": cfg.party,
                "precision": cfg.train.precision,
                "microbatches": cfg.train.microbatches,
                "staleness": cfg.train.staleness,
                # the most training batches this party had in flight at once (K + 1 once a pipeline filled)
                "max_in_flight": in_flight.max_in_flight if in_flight is not None else min(trainer.steps, 1),
                **TIMER.report(),
            },
            f,
            indent=2,
        )
