"""The leader's evaluation and early stopping (EVAL, SNAPSHOT, RESTORE) and the metrics it assembles at the end."""

from __future__ import annotations

import numpy as np
import torch

from vfl.data.shards import eval_batches
from vfl.labeldp.release import bayes_accuracy_of
from vfl.obs.progress import track
from vfl.training.step_timer import TIMER
from vfl.wire.messages import Restore, Snapshot


def snapshot(trainer, step: int) -> int:
    """Every party keeps a copy of its weights and optimizer state at this (best so far) step."""
    for f in trainer.followers:
        trainer.ch.post(f, Snapshot(step=step))
    return trainer.party.snapshot(step) + trainer.top.snapshot(step)


def restore(trainer, step: int) -> None:
    """Every party goes back to its snapshot of the best step (chosen on randomized validation labels)."""
    for f in trainer.followers:
        trainer.ch.post(f, Restore(step=step))
    trainer.party.restore(step)
    trainer.top.restore(step)
    trainer.codecs.reset()  # top-k's residuals belong to the discarded steps
    trainer.restored_step = step


@torch.no_grad()
def evaluate(trainer, split: str) -> np.ndarray:
    """Predicted click (n,) or class (n, K) probabilities, or values (n,), on the valid or test split (scored on
    the leader only)."""
    party = trainer.party
    n = len(party.valid_split if split == "valid" else party.test_split)
    lo, hi = trainer.ctx.eval_range(n)  # N ranks: each scores its contiguous part, gathered below
    probs = np.empty(hi - lo if trainer.task.outputs == 1 else (hi - lo, trainer.task.outputs))
    for part in track(eval_batches(hi - lo, trainer.cfg.train.eval_batch_size), desc=f"evaluate {split}", unit="batch"):
        sl = slice(lo + part.start, lo + part.stop)
        ids = (party.valid_split if split == "valid" else party.test_split).ids[sl]
        trainer.exchange.eval_all(split, sl.start, sl.stop, ids)  # the followers compute while the leader does
        cuts = [party.forward_eval(sl, split), *trainer.exchange.eval_cuts(split, sl.start, sl.stop)]
        probs[part] = trainer.top.predict(cuts)
    return trainer.ctx.gather_rows(probs, n)


def metrics(trainer) -> dict:
    """metrics.json's figures: the loop's summary, the release, the rows, the wire, the options of the run."""
    party, loop, ch, cfg = trainer.party, trainer.loop, trainer.ch, trainer.cfg
    n_train, n_test, evals = len(party.train_split), len(party.test_split), len(loop.history)
    n_valid = len(party.valid_split)
    sent, received = ch.bytes_sent - trainer.wire_at_start[0], ch.bytes_received - trainer.wire_at_start[1]
    samples_moved = loop.samples + (n_valid + n_test) * evals
    return {
        **loop.summary(),
        "label_dp": trainer.labels.report,
        "bayes_test_auc": party.shard.manifest.get("bayes_test_auc"),
        **bayes_accuracy_of(party.shard.manifest),
        "parties": [cfg.party, *trainer.followers],
        "cut_dims": {cfg.party: party.cut_dim, **trainer.cut_dims},
        "rows": {"train": n_train, "valid": n_valid, "test": n_test},
        "snapshot_bytes": {cfg.party: loop.snapshot_bytes, **trainer.follower_snapshot_bytes},
        "wire": {
            "bytes_from_leader": sent,
            "bytes_to_leader": received,
            "bytes_from_leader_per_sample": sent / max(samples_moved, 1),
            "bytes_to_leader_per_sample": received / max(samples_moved, 1),
        },
        # bytes each way per training sample (EVAL's cuts and every header included), under network.compression
        "wire_bytes_per_sample": {
            "up": received / max(loop.samples, 1),
            "down": sent / max(loop.samples, 1),
        },
        "compression": {
            "embedding": trainer.codecs.embedding.agreement or "none",
            "gradient": trainer.codecs.gradient.agreement or "none",
        },
        "run_id": ch.run,
        "mode": "split",
        "precision": cfg.train.precision,
        "microbatches": cfg.train.microbatches,
        "staleness": cfg.train.staleness,
        "staleness_auto": trainer.staleness_choice.as_dict() if trainer.staleness_choice is not None else None,
        "staleness_correction": cfg.train.staleness_correction,
        "staleness_leader_bottom": cfg.train.staleness_leader_bottom,
        "step_breakdown": TIMER.report(),
        **rank_metrics(trainer),
    }


def rank_metrics(trainer) -> dict:
    """ranks, per-rank and total samples/s, wire bytes of every rank (collectives: every rank calls it)."""
    ctx = trainer.ctx
    seconds = max(trainer.loop.train_seconds, 1e-9)
    per_rank = ctx.per_rank(trainer.local_samples / seconds)
    return {
        "ranks": ctx.ranks,
        "samples_per_second_per_rank": per_rank,
        "samples_per_second_total": sum(per_rank),
        "label_digests_per_rank": trainer.label_digests,
        "wire_bytes_all_ranks": ctx.total(trainer.ch.bytes_sent + trainer.ch.bytes_received),
    }
