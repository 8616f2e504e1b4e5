"""The leader's synchronous training loop: ask for embeddings, run the top, return gradients, evaluate."""

from __future__ import annotations

import numpy as np

from leader import checkpoints, run_report, training_steps, welcome
from leader.builders import build_loop, build_top, randomized_labels
from leader.prior_sources import AllPartyPrior
from vfl.config.schema import PartyConfig
from vfl.distributed.context import RankContext
from vfl.labeldp.prior import prior_fn_for
from vfl.labeldp.release import LabelDPRelease, leader_task, open_label_key
from vfl.obs.curves import RunCurves
from vfl.obs.metrics import RunLog
from vfl.runs.record import key_fingerprints
from vfl.session.compression import LeaderCodecs
from vfl.session.leader import HandshakeError, LeaderSession
from vfl.session.leader_steps import LeaderSteps
from vfl.training.loop import TrainingLoop
from vfl.training.party import BottomParty
from vfl.training.top import TopTrainer
from vfl.training.weight_stash import WeightStash
from vfl.wire import LeaderChannel

__all__ = ["HandshakeError", "LeaderTrainer"]  # HandshakeError is the session's (vfl/session/leader.py)


class LeaderTrainer:
    """Drives every step; followers only react to FORWARD / EVAL / SAVE / WAIT / DONE. The handshake is
    leader/welcome.py's, the steps leader/training_steps.py's, evaluation and metrics leader/run_report.py's and
    checkpoints leader/checkpoints.py's; this class holds the run's state and builds what prepare() needs."""

    def __init__(
        self,
        cfg: PartyConfig,
        channel: LeaderChannel,
        party: BottomParty,
        log: RunLog,
        out_dir: str,
        label_key=None,
        ctx: RankContext | None = None,
    ):
        self.cfg = cfg
        self.ctx = ctx or RankContext()  # N ranks: this rank's slice of every batch, DDP, collectives
        self.local_samples = 0
        self.label_digests: list[str] = []
        self.ch = channel
        self.wire_at_start = (channel.bytes_sent, channel.bytes_received)  # PSI's bytes are reported apart (`psi`)
        self.party = party
        self.log = log
        self.out_dir = out_dir
        # the handshake, the keepalive and the followers' cuts (shared with prediction and serving)
        self.session = LeaderSession(cfg, channel, party.device)
        self.followers = self.session.followers
        self.cut_dims = self.session.cut_dims
        # network.compression: cuts decoded by the session, gradients coded here (top-k's residuals per sample)
        self.codecs = LeaderCodecs(cfg.network.compression, len(party.train_split))
        self.session.embedding_codec = self.codecs.embedding
        self.exchange = LeaderSteps(self.session, self.codecs)  # every FORWARD, cut, GRADIENT and EVAL of the run
        self.labels = None
        self.staleness_choice = None  # train.staleness auto: what it chose and why (staleness_auto.AutoChoice)
        self.top: TopTrainer | None = None
        self.loop: TrainingLoop | None = None  # built in prepare(), once the validation labels are randomized
        # train.staleness K > 0 (training_steps.stale_schedule): the leader's own stashed bottom (stale) and the
        # batch order of the epoch in flight
        self.stash: WeightStash | None = None
        self.batch_orders: dict[int, list[np.ndarray]] = {}
        self.follower_snapshot_bytes: dict[str, int] = {}
        self.restored_step: int | None = None  # the step early stopping went back to (its weights are final)
        self.last_checkpoint: tuple[int, str] | None = None  # (global step, path) of the last checkpoint written
        self.key_fingerprints = key_fingerprints(cfg)  # recorded in every checkpoint for prediction's fingerprint
        self.rejoin_auto = False  # --resume auto: resume steps are agreed, not required equal (vfl/session/rejoin.py)
        self.resume = checkpoints.load_resume(cfg, party)
        self.start_step = self.resume["step"] if self.resume else 0
        self.ctx.check_batches(len(party.train_split), cfg.train.batch_size)
        party.train_model = self.ctx.wrap(party.model)
        # binary, K classes (K from the leader's shard) or regression; followers are never told the task or K
        self.task = leader_task(cfg.train.task, party.shard)
        # the key store is opened before any follower connects (leader/train.py passes it): its problems never
        # reach a follower
        # every number label DP needs (eps, mechanism, flip probability or transition, prior), read once from the config
        self.release = LabelDPRelease.from_config(cfg.privacy.label_dp, self.task)
        rel = self.release
        self.label_key = (
            label_key
            if label_key is not None or rel is None
            else open_label_key(rel.store_dir, rel.key_file, party.shard)
        )

    def handshake(self, check_link: bool = False) -> None:
        """Greet the followers, time each link, and welcome them to the run; check_link: measure each link's
        bandwidth too, log what it calls for and raise LinkCheckDone (the followers are told to stop)."""
        welcome.handshake(self, check_link)

    def _keepalive(self) -> None:
        """During long preparation, tell followers the leader is alive before their deadlines pass."""
        self.session.keepalive()

    def prepare(self) -> None:
        """Randomize the training labels (label DP; LP-2ST trains its prior here) and build the top."""
        in_dim = self.party.cut_dim + sum(self.cut_dims[f] for f in self.followers)
        rel = self.release
        all_parties = self.task.kind == "multiclass" and rel is not None and rel.uses_prior
        prior_fn = (
            AllPartyPrior(self.cfg, rel, self.party, self.session, self.codecs, self.log, in_dim)
            if all_parties
            else prior_fn_for(self.cfg, rel, self.party, self._keepalive)
        )
        self.labels = randomized_labels(rel, self.party, prior_fn, self.label_key, self.log)
        checkpoints.check_resume_release(self.resume, self.labels.release, self.cfg.train.resume_from)
        self.label_digests = self.ctx.same_on_every_rank(
            "the training labels (noisy under label DP)",
            np.ascontiguousarray(self.labels.labels, "<f4").tobytes()
            + np.ascontiguousarray(self.labels.valid, "<f8" if self.task.is_regression else "<i8").tobytes(),
        )
        cuts = (self.party.cut_dim, *(self.cut_dims[f] for f in self.followers))  # each party's cut, leader first
        self.top = build_top(self.cfg, self.party, cuts, rel, self.task, self.labels)
        self.loop = build_loop(self.cfg, self.party, self.log, self.labels, rel, self.task)
        checkpoints.resume_training(self)
        if self.ctx.is_main:  # curves, like checkpoints and metrics.json, are rank 0's
            self.loop.curves = RunCurves(
                self.out_dir, self.cfg.party, self.start_step, log=self.log, regression=self.task.is_regression
            )
        checkpoints.auto_checkpoints(self)
        if self.ctx.ranks > 1:
            self.loop.agree = self.ctx.agree_selection
            self.top.train_model = self.ctx.wrap(self.top.model)
        self._keepalive()  # TensorBoard's import takes seconds: followers with short deadlines hear from us

    def train(self) -> None:
        """Every step of the run, with its evaluations, checkpoints, snapshots and restores (the training loop's)."""
        training_steps.train(self)

    def snapshot(self, step: int) -> int:
        """Every party keeps a copy of its weights and optimizer state at this (best so far) step."""
        return run_report.snapshot(self, step)

    def restore(self, step: int) -> None:
        """Every party goes back to its snapshot of the best step (chosen on randomized validation labels)."""
        run_report.restore(self, step)

    def evaluate(self, split: str) -> np.ndarray:
        """Predicted click (n,) or class (n, K) probabilities, or values (n,), on the valid or test split (scored on
        the leader only)."""
        return run_report.evaluate(self, split)

    def checkpoint(self, epoch: int, step: int, tag: str) -> str:
        """Every party's checkpoint `tag` of this step; returns this party's path."""
        return checkpoints.checkpoint(self, epoch, step, tag)

    def finish(self, epoch: int, step: int) -> None:
        """The final checkpoint, DONE, and every follower's BYE."""
        checkpoints.finish(self, epoch, step)

    def metrics(self) -> dict:
        """metrics.json's figures of the run (collectives under N ranks: every rank calls it)."""
        return run_report.metrics(self)

    def rank_metrics(self) -> dict:
        """ranks, per-rank and total samples/s, wire bytes of every rank (collectives: every rank calls it)."""
        return run_report.rank_metrics(self)
