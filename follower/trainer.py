"""The follower's loop: answer FORWARD with an embedding, apply the GRADIENT, answer EVAL, save on SAVE/DONE."""

from __future__ import annotations

from collections import deque

import numpy as np

from follower import checkpoints, training_steps
from follower.checkpoints import GradientRecorder
from vfl.config.schema import PartyConfig
from vfl.distributed.context import RankContext
from vfl.distributed.pairing import rank_meta, rank_problems
from vfl.obs.metrics import RunLog
from vfl.runs.record import key_fingerprints
from vfl.session.compression import FollowerCodecs
from vfl.session.cut_release import CutRelease
from vfl.session.follower import FollowerSession
from vfl.session.follower_steps import FollowerSteps
from vfl.session.handshake import hello_message, new_nonce
from vfl.training.checkpoint import checkpoint_tag
from vfl.training.party import BottomParty
from vfl.training.staleness import InFlight
from vfl.training.staleness_correction import correction_for
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


class FollowerTrainer:
    """Reacts to the leader; never decides anything about the schedule itself. The steps are
    follower/training_steps.py's, the files it writes follower/checkpoints.py's."""

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
        self.batch_orders: dict[int, list[np.ndarray]] = {}  # the order of the epoch being trained
        self.recorder = GradientRecorder(cfg.debug.record_gradients) if cfg.debug.record_gradients else None
        # train.staleness K > 0: the batches in flight (cut sent, gradient not yet applied; at most K + 1, counted in
        # max_in_flight), each with its stashed weights and ids (vfl/training/staleness.py, weight_stash.py)
        # (auto: built at the welcome, which names the K the leader chose)
        self.in_flight: InFlight | None = None
        self.stash: WeightStash | None = None
        if cfg.train.staleness != "auto":
            self._pipeline(cfg.train.staleness)
        self.ahead_ids: deque[np.ndarray] = deque()  # under staleness: the ids of each batch in flight, oldest first
        self.step_clock = 0.0  # under staleness: when the last gradient was applied (a step ends there)
        self.steps = 0
        self.start_step = 0
        self.prior: BottomParty | None = None  # LP-2ST stage-one bottom while the leader trains the all-party prior
        self.prior_rows: np.ndarray | None = None
        self.prior_orders: dict[int, list[np.ndarray]] = {}
        self._done = False  # DONE was answered: run() returns
        self.restored_step: int | None = None  # the step early stopping went back to (its weights are final)
        self.last_checkpoint: tuple[int, str] | None = None  # (global step, path) of the last checkpoint written
        self.key_fingerprints = key_fingerprints(cfg)  # recorded in every checkpoint for prediction's fingerprint
        checkpoints.load_resume(self)
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
        self.ch.resync.resume_hint = lambda: checkpoints.resume_hint(self.last_checkpoint)
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

    def _rows(self, epoch: int, step: int) -> np.ndarray:
        """This rank's rows of training batch `step` of `epoch`."""
        return training_steps.batch_rows(self, epoch, step)

    def run(self) -> None:
        """Answer the leader's messages until DONE, each by the handler of its class."""
        handlers = {
            Forward: lambda msg: training_steps.on_forward(self, msg),
            Eval: self._on_eval,
            Save: self._on_save,
            Snapshot: self._on_snapshot,
            Restore: self._on_restore,
            Wait: self._on_wait,
            Done: self._on_done,
            Prior: lambda msg: training_steps.on_prior(self, msg),
        }
        if self.in_flight is not None:  # train.staleness: gradients arrive between FORWARDs; anything else drains first
            handlers = {
                c: h if c in (Forward, Wait) else training_steps.after_drain(self, c, h) for c, h in handlers.items()
            }
            handlers[Gradient] = lambda msg: training_steps.on_gradient(self, msg)
        self.session.serve(handlers, lambda: self._done)

    def _on_wait(self, msg: Wait) -> None:
        """The leader is still preparing; a fresh deadline starts."""

    def _on_snapshot(self, msg: Snapshot) -> None:
        self.party.snapshot(msg.step)

    def _on_restore(self, msg: Restore) -> None:
        self.party.restore(msg.step)
        self.restored_step = msg.step
        self.log(f"restored the snapshot of global step {msg.step} (the leader's choice on validation)")

    def _on_save(self, msg: Save) -> None:
        checkpoints.save(self, checkpoint_tag(msg.tag), msg.epoch, msg.step)

    def _on_done(self, msg: Done) -> None:
        checkpoints.save(self, "final", msg.epoch, msg.step)
        if self.recorder:
            self.recorder.save()
        checkpoints.save_breakdown(self)
        if self.ctx.is_main and self.cut_release.write_report(self.out_dir):
            self.log(self.cut_release.summary())
        self.ch.post(Bye(steps=self.steps, snapshot_bytes=self.party.best.nbytes if self.party.best is not None else 0))
        self._done = True

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
