"""The follower's loop: answer FORWARD with an embedding, apply the GRADIENT, answer EVAL, save on SAVE/DONE."""

from __future__ import annotations

import errno
import json
import os
import time
from collections import deque

import numpy as np

from privacy.durable_files import replacing_file
from vfl.config.schema import PartyConfig
from vfl.data.shards import batch_order
from vfl.distributed.context import RankContext
from vfl.distributed.pairing import rank_meta, rank_problems
from vfl.labeldp.prior import prior_config, prior_order
from vfl.obs.metrics import RunLog
from vfl.preflight import resume_identity
from vfl.runs.record import key_fingerprints, run_record
from vfl.session.compression import FollowerCodecs
from vfl.session.cut_release import CutRelease
from vfl.session.follower import FollowerSession
from vfl.session.follower_steps import FollowerSteps
from vfl.session.handshake import hello_message, new_nonce
from vfl.training.checkpoint import checkpoint_tag, load_resume_checkpoint, save_checkpoint
from vfl.training.microbatch import micro_slices
from vfl.training.party import BottomParty
from vfl.training.staleness import InFlight, StalenessError
from vfl.training.staleness_correction import correction_for
from vfl.training.step_timer import TIMER
from vfl.training.weight_stash import WeightStash
from vfl.wire import FollowerChannel, WireError
from vfl.wire.messages import (
    Bye,
    Done,
    Eval,
    Forward,
    Gradient,
    Prior,
    Restore,
    Save,
    Snapshot,
    Wait,
    Welcome,
)


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


class FollowerTrainer:
    """Reacts to the leader; never decides anything about the schedule itself."""

    def __init__(
        self,
        cfg: PartyConfig,
        channel: FollowerChannel,
        party: BottomParty,
        log: RunLog,
        out_dir: str,
        ctx: RankContext | None = None,
    ):
        self.cfg = cfg
        self.ctx = ctx or RankContext()  # N ranks: this rank's slice of every batch, DDP
        self.ch = channel
        self.session = FollowerSession(cfg, channel)  # the handshake and the message loop (shared with prediction)
        self.codecs = FollowerCodecs(cfg.network.compression)  # network.compression: cuts coded, gradients decoded
        # privacy.embedding_dp: every cut sent (training, EVAL) is clipped and noised here, counted per row
        self.cut_release = CutRelease(
            cfg.privacy.embedding_dp, party.cut_dim, log, cfg.party, cfg.debug.record_cuts,
            secret_key_file=cfg.network.secret_key_file,
        )  # fmt: skip
        for split in ("train", "valid", "test"):  # a row's noise is keyed by its id
            self.cut_release.bind_rows(split, getattr(party, f"{split}_split").ids)
        self.lineage: str | None = None  # embedding DP: the first run's id, carried by every resume (its ledger scope)
        self.exchange = FollowerSteps(self.session, self.codecs, self.cut_release)  # every check, cut and gradient
        self.party = party
        self.log = log
        self.out_dir = out_dir
        self._orders: dict[int, list[np.ndarray]] = {}
        self.recorder = GradientRecorder(cfg.debug.record_gradients) if cfg.debug.record_gradients else None
        # train.staleness K > 0: the batches in flight (cut sent, gradient not yet applied; at most K + 1, counted in
        # max_in_flight), each with its stashed weights and ids (vfl/training/staleness.py, weight_stash.py)
        # (auto: built at the welcome, which names the K the leader chose)
        self.in_flight: InFlight | None = None
        self.stash: WeightStash | None = None
        if cfg.train.staleness != "auto":
            self._pipeline(cfg.train.staleness)
        self._ahead_ids: deque[np.ndarray] = deque()
        self._step_clock = 0.0  # under staleness: when the last gradient was applied (a step ends there)
        self.steps = 0
        self.start_step = 0
        self.prior: BottomParty | None = None  # LP-2ST stage-one bottom while the leader trains the all-party prior
        self.prior_rows: np.ndarray | None = None
        self._prior_orders: dict[int, list[np.ndarray]] = {}
        self._done = False  # DONE was answered: run() returns
        self.restored_step: int | None = None  # the step early stopping went back to (its weights are final)
        self.last_checkpoint: tuple[int, str] | None = None  # (global step, path) of the last checkpoint written
        self.key_fingerprints = key_fingerprints(cfg)  # recorded in every checkpoint for prediction's fingerprint
        if cfg.train.resume_from:
            ckpt = load_resume_checkpoint(cfg.train.resume_from, cfg.party, ("bottom",))
            party.load_state(ckpt["state"]["bottom"], resume=True)
            self.start_step = ckpt["step"]
            self.lineage = (ckpt.get("extra") or {}).get("embedding_dp_lineage")
        self.ctx.check_batches(len(party.train_split), cfg.train.batch_size)
        party.train_model = self.ctx.wrap(party.model)

    def handshake(self) -> Welcome:
        hello = hello_message(self.cfg, self.party.shard, self.start_step, new_nonce(), rank_meta(self.ctx.env))
        welcome: Welcome = self.session.greet(hello, Welcome)
        problems = rank_problems("the leader", welcome, self.ctx.env, f"follower {self.cfg.party}")
        if problems:
            raise WireError("handshake failed: " + "; ".join(problems))
        self._agree_on_staleness(welcome)
        self.session.join(welcome.run)
        # network.reconnect_s: from here a lost leader is waited for and resynchronised (vfl/wire/resync.py)
        self.exchange.steps_per_epoch = welcome.steps_per_epoch
        self.ch.notice = self.log
        self.ch.resync.reconnect_s = self.cfg.network.reconnect_s
        self.ch.resync.resume_hint = self._resume_hint
        # the leader's epochs decide the run's length, so they size this party's lr schedule (not its own config)
        self.party.optimizer.total_steps = welcome.epochs * welcome.steps_per_epoch
        self.lineage = self.lineage or welcome.run
        sends = {"train": welcome.sends_train, "valid": welcome.sends_valid, "test": welcome.sends_test}
        self.cut_release.plan_training(sends, self.lineage)  # what the leader's schedule sends, before any send
        return welcome

    def _pipeline(self, k: int) -> None:
        """train.staleness K: the in-flight window and the weight stash with this party's correction (K > 0)."""
        if k:
            self.in_flight = InFlight(k)
            self.stash = WeightStash(self.party, correction_for(self.cfg.train, self.party))

    def _agree_on_staleness(self, welcome: Welcome) -> None:
        """The welcome's K: the leader's choice under train.staleness auto, else this party's own value."""
        k, ours = welcome.staleness or 0, self.cfg.train.staleness
        if ours == "auto":
            self.cfg = self.cfg.model_copy(update={"train": self.cfg.train.model_copy(update={"staleness": k})})
            self.log(f"train.staleness auto: the leader chose {k}")
            self._pipeline(k)
        elif k != ours:
            raise WireError(f"WELCOME names train.staleness={k}, but this party has train.staleness={ours}")

    def _resume_hint(self) -> str:
        """What a run that cannot go on resumes from (the line this party prints when the leader does not come back)."""
        if self.last_checkpoint is None:
            return "no checkpoint was written yet (train.checkpoint_every): start the run again"
        step, path = self.last_checkpoint
        return f"resume from the checkpoint of step {step} (this party's: {path}; --resume PATH)"

    def _rows(self, epoch: int, step: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {
                epoch: batch_order(len(self.party.train_split), self.cfg.train.batch_size, self.cfg.train.seed, epoch)
            }
        order = self._orders[epoch]
        if not 0 <= step < len(order):
            raise WireError(f"FORWARD for step {step} of epoch {epoch}, but an epoch has {len(order)} steps")
        return self.ctx.rows(order[step])  # this rank's slice of the global batch

    def run(self) -> None:
        """Answer the leader's messages until DONE, each by the handler of its class."""
        handlers = {
            Forward: self._on_forward,
            Eval: self._on_eval,
            Save: self._on_save,
            Snapshot: self._on_snapshot,
            Restore: self._on_restore,
            Wait: self._on_wait,
            Done: self._on_done,
            Prior: self._on_prior,
        }
        if self.in_flight is not None:  # train.staleness: gradients arrive between FORWARDs; anything else drains first
            handlers = {c: h if c in (Forward, Wait) else self._after_drain(c, h) for c, h in handlers.items()}
            handlers[Gradient] = self._on_gradient
        self.session.serve(handlers, lambda: self._done)

    def _after_drain(self, cls, handler):
        """`handler`, refused while a training batch is in flight: the leader drains the pipeline first."""

        def drained(msg) -> None:
            try:
                self.in_flight.require_drained(cls.TYPE)
            except StalenessError as e:
                raise WireError(str(e)) from None
            handler(msg)

        return drained

    def _forward_ahead(self, msg: Forward) -> None:
        """FORWARD under train.staleness K: the cut goes out at once and its batch stays in flight, its weights
        stashed, until its GRADIENT arrives (_on_gradient); a FORWARD beyond K + 1 in flight is refused."""
        epoch, step = msg.epoch, msg.step
        rows = self._rows(epoch, step)
        ids = self.party.train_split.ids[rows]
        self.exchange.check_forward(msg, ids)
        try:
            self.in_flight.forwarded((epoch, step))
        except StalenessError as e:
            raise WireError(str(e)) from None
        out = self.stash.forward(rows)
        self._ahead_ids.append(ids)
        self.exchange.send_cut(out, "train", len(self.party.train_split), rows, epoch=epoch, step=step, micro=0)

    def _on_gradient(self, msg: Gradient) -> None:
        """GRADIENT under train.staleness: that of the oldest batch in flight, backpropagated through the weights
        that computed its cut and applied to the weights as they are now (delayed SGD)."""
        due = self.in_flight.oldest
        if due is None:
            raise WireError(
                f"GRADIENT: expected no GRADIENT (no batch in flight), got epoch {msg.epoch!r} step {msg.step!r} "
                f"phase {msg.phase}"
            )
        epoch, step = due
        grad = self.exchange.checked_gradient(msg, epoch, step, 0, tuple(self.stash.oldest_cut.shape))
        ids = self._ahead_ids.popleft()
        if self.recorder:
            self.recorder.add(epoch, step, ids, grad)
        # backpropagated through the stashed weights, corrected (train.staleness_correction) and applied
        self.stash.apply(self.exchange.cut_gradient(self.stash.oldest_cut, grad))
        self.in_flight.applied(due)
        self.steps += 1
        now = time.perf_counter()  # a step: from the last applied gradient (the first FORWARD) to this one
        TIMER.parts["wire_wait"] = TIMER.parts.get("wire_wait", 0.0) + self.session.waited
        TIMER.add_step(now - self._step_clock)
        self._step_clock = now
        steps = len(self._orders[epoch])
        if (step + 1) % self.cfg.train.log_every == 0 or step + 1 == steps:
            self.log(f"epoch {epoch} step {step + 1}/{steps} gradient applied")  # the loss stays with the leader

    def _on_wait(self, msg: Wait) -> None:
        """The leader is still preparing; a fresh deadline starts."""

    def _on_forward(self, msg: Forward) -> None:
        if msg.phase == "prior":
            self._train_step(msg, prior=True)
            return
        if self.prior is not None:
            self.log("LP-2ST stage one done; its bottom is dropped")
            self.prior, self.prior_rows, self._prior_orders = None, None, {}
        waited = self.session.waited  # a step's time includes the wait for its FORWARD (not the first)
        first = self.steps == 0 and not self._ahead_ids  # the main training's first FORWARD
        if first:  # the breakdown covers the main training only, from its first FORWARD
            TIMER.reset()
            TIMER.watch(self.party.device)
            waited = 0.0
        t1 = time.perf_counter()
        self._step_clock = t1 if first else self._step_clock
        (self._train_step if self.in_flight is None else self._forward_ahead)(msg)
        TIMER.parts["wire_wait"] = TIMER.parts.get("wire_wait", 0.0) + waited
        if self.in_flight is None:  # under staleness a step ends when its gradient is applied (_on_gradient)
            TIMER.add_step(time.perf_counter() - t1 + waited)

    def _on_snapshot(self, msg: Snapshot) -> None:
        self.party.snapshot(msg.step)

    def _on_restore(self, msg: Restore) -> None:
        self.party.restore(msg.step)
        self.restored_step = msg.step
        self.log(f"restored the snapshot of global step {msg.step} (the leader's choice on validation)")

    def _on_save(self, msg: Save) -> None:
        self._save(checkpoint_tag(msg.tag), msg.epoch, msg.step)

    def _on_done(self, msg: Done) -> None:
        self._save("final", msg.epoch, msg.step)
        if self.recorder:
            self.recorder.save()
        self._save_breakdown()
        if self.ctx.is_main and self.cut_release.write_report(self.out_dir):
            self.log(self.cut_release.summary())
        self.ch.post(Bye(steps=self.steps, snapshot_bytes=self.party.best.nbytes if self.party.best is not None else 0))
        self._done = True

    def _on_prior(self, msg: Prior) -> None:
        """PRIOR: the stage-one row indices (strictly increasing, by parse) and epochs: a fresh bottom for LP-2ST's
        stage one."""
        n = len(self.party.train_split)
        rows = msg.indices
        if rows[-1] >= n:
            raise WireError(
                f"PRIOR from the leader must carry its stage-one rows as one increasing int64 vector "
                f"of {rows.size} indices in [0, {n})"
            )
        self.prior_rows = rows.copy()
        self.prior = BottomParty(prior_config(self.cfg, msg.epochs), self.party.shard, self.party.device)
        self._prior_orders = {}
        self.log(
            f"LP-2ST stage one: training a prior bottom on {rows.size} of {n} training rows for {msg.epochs} epoch(s)"
        )

    def _prior_batch(self, epoch: int, step: int) -> np.ndarray:
        if epoch not in self._prior_orders:
            self._prior_orders = {
                epoch: prior_order(self.prior_rows, self.cfg.train.batch_size, self.cfg.train.seed, epoch)
            }
        order = self._prior_orders[epoch]
        if not 0 <= step < len(order):
            raise WireError(f"FORWARD (prior) for step {step} of epoch {epoch}, but stage one has {len(order)} steps")
        return order[step]

    def _train_step(self, msg: Forward, prior: bool = False) -> None:
        epoch, step = msg.epoch, msg.step
        if prior and self.prior is None:
            raise WireError("FORWARD for the LP-2ST prior before any PRIOR message")
        rows = self._prior_batch(epoch, step) if prior else self._rows(epoch, step)
        party = self.prior if prior else self.party
        ids = self.party.train_split.ids[rows]
        self.exchange.check_forward(msg, ids)
        if (
            prior
        ):  # stage one: whole batches, no logs per step, not recorded (the leakage attacks read the main training)
            out = party.forward_train(rows)
            self.exchange.send_cut(out, "train", len(self.party.train_split), rows, epoch=epoch, step=step)
            grad = self.exchange.gradient(epoch, step, None, tuple(out.shape), phase="prior")
            party.apply_gradient(self.exchange.cut_gradient(out, grad))
            return
        # every micro-batch's embedding goes out before the first gradient is awaited: the leader works on
        # micro-batch j while this party computes j + 1 (M = 1: one whole batch, as without micro-batches)
        parts = micro_slices(rows.size, self.cfg.train.microbatches)
        shapes, outs = [], []
        for j, part in enumerate(parts):
            out = self.party.forward_train(rows[part])
            shapes.append(tuple(out.shape))
            outs.append(out)
            self.exchange.send_cut(
                out, "train", len(self.party.train_split), rows[part], epoch=epoch, step=step, micro=j
            )
        for j, part in enumerate(parts):
            grad = self.exchange.gradient(epoch, step, j, shapes[j])
            if self.recorder:
                self.recorder.add(epoch, step, ids[part], grad)
            self.party.accumulate_gradient(self.exchange.cut_gradient(outs[j], grad), j)
        self.party.step_optimizer()
        self.steps += 1
        steps = len(self._orders[epoch])
        if (step + 1) % self.cfg.train.log_every == 0 or step + 1 == steps:
            self.log(f"epoch {epoch} step {step + 1}/{steps} gradient applied")  # the loss stays with the leader

    def _save_breakdown(self) -> None:
        """OUT/<party>_step_breakdown.json: where this party's training steps spent their time."""
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"{self.cfg.party}_step_breakdown.json")
        with replacing_file(path, text=True) as f:
            json.dump(
                {
                    "party": self.cfg.party,
                    "precision": self.cfg.train.precision,
                    "microbatches": self.cfg.train.microbatches,
                    "staleness": self.cfg.train.staleness,
                    # the most training batches this party had in flight at once (K + 1 once a pipeline filled)
                    "max_in_flight": self.in_flight.max_in_flight if self.in_flight is not None else min(self.steps, 1),
                    **TIMER.report(),
                },
                f,
                indent=2,
            )

    def _on_eval(self, msg: Eval) -> None:
        split, start, stop = msg.split, msg.start, msg.stop
        prior = msg.phase == "prior"
        if prior and (self.prior is None or split != "train"):
            raise WireError("EVAL for the LP-2ST prior must follow a PRIOR message and name the train split")
        if not prior and split not in ("valid", "test"):
            raise WireError(f"EVAL split must be 'valid' or 'test', got {split!r}")
        rows = {"train": self.party.train_split, "valid": self.party.valid_split}.get(split, self.party.test_split)
        n = len(rows)
        if not start < stop <= n:
            raise WireError(f"EVAL range {start}..{stop} outside the {split} split of {n} rows")
        self.exchange.check_eval(msg, rows.ids[start:stop])
        out = (self.prior if prior else self.party).forward_eval(slice(start, stop), split)
        self.exchange.send_cut(out, split, n, slice(start, stop), eval=(split, start, stop))

    def _save(self, tag: str, epoch: int, step: int) -> None:
        if not self.ctx.is_main:  # every rank holds the same weights: rank 0 writes the party's checkpoint
            return
        path = os.path.join(self.out_dir, "checkpoints", f"{self.cfg.party}_{tag}.pt")
        # the training run, the step whose weights these are, the keys: prediction's fingerprint
        model_step = step if self.restored_step is None else self.restored_step
        record = run_record(
            self.cfg, self.ch.run, model_step, {self.cfg.party: self.party.cut_dim}, self.key_fingerprints
        )
        state = {"bottom": self.party.state()}
        extra = {"run": record, "embedding_dp_lineage": self.lineage or self.ch.run}
        save_checkpoint(path, self.cfg.party, state, epoch, step, extra, resume_identity(self.cfg))
        self.last_checkpoint = (step, path)
