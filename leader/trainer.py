"""The leader's synchronous training loop: ask for embeddings, run the top, return gradients, evaluate."""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from leader.builders import build_loop, build_top, randomized_labels
from leader.prior_sources import AllPartyPrior
from vfl.config.schema import PartyConfig
from vfl.data.shards import batch_order, eval_batches, steps_per_epoch
from vfl.distributed.context import RankContext
from vfl.distributed.pairing import rank_meta, rank_problems
from vfl.labeldp.prior import prior_fn_for
from vfl.labeldp.release import LabelDPRelease, bayes_accuracy_of, leader_task, open_label_key
from vfl.obs.curves import RunCurves
from vfl.obs.metrics import RunLog
from vfl.obs.progress import track
from vfl.preflight import resume_identity
from vfl.runs.record import key_fingerprints, run_record
from vfl.session.compression import LeaderCodecs
from vfl.session.handshake import hello_message, hello_problems
from vfl.session.leader import HandshakeError, LeaderSession
from vfl.session.leader_steps import LeaderSteps
from vfl.session.link_probe import LinkCheckDone, announce, check_report
from vfl.session.rejoin import AUTO_CHECKPOINT_S, common_start, disagreement_line
from vfl.training.checkpoint import load_resume_checkpoint, save_checkpoint
from vfl.training.loop import TrainingLoop
from vfl.training.microbatch import embedding_bytes_bound, micro_slices, pipelined, weighted_loss
from vfl.training.party import BottomParty
from vfl.training.sends_per_row import sends_per_row
from vfl.training.staleness import StalenessSchedule, pauses_after
from vfl.training.staleness_auto import STEP_FACTOR, choose_staleness, time_bottom_step
from vfl.training.staleness_correction import correction_for
from vfl.training.step_timer import TIMER
from vfl.training.top import TopTrainer
from vfl.training.weight_stash import WeightStash
from vfl.wire import LeaderChannel
from vfl.wire.messages import Bye, Done, Hello, Restore, Save, Snapshot, Welcome
from vfl.wire.resync import RejoinRequested

__all__ = ["HandshakeError", "LeaderTrainer"]  # HandshakeError is the session's (vfl/session/leader.py)


class LeaderTrainer:
    """Drives every step; followers only react to FORWARD / EVAL / SAVE / WAIT / DONE."""

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
        self._wire_at_start = (channel.bytes_sent, channel.bytes_received)  # PSI's bytes are reported apart (`psi`)
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
        self.follower_snapshot_bytes: dict[str, int] = {}
        self.restored_step: int | None = None  # the step early stopping went back to (its weights are final)
        self.last_checkpoint: tuple[int, str] | None = None  # (global step, path) of the last checkpoint written
        self.key_fingerprints = key_fingerprints(cfg)  # recorded in every checkpoint for prediction's fingerprint
        self.resume = None
        self.rejoin_auto = False  # --resume auto: resume steps are agreed, not required equal (vfl/session/rejoin.py)
        if cfg.train.resume_from:
            self.resume = load_resume_checkpoint(cfg.train.resume_from, cfg.party, ("bottom", "top"))
            party.load_state(self.resume["state"]["bottom"], resume=True)
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

    # -- handshake ---------------------------------------------------------------------------
    def handshake(self, check_link: bool = False) -> None:
        """Greet the followers, time each link, and welcome them to the run; check_link: measure each link's
        bandwidth too, log what it calls for and raise LinkCheckDone (the followers are told to stop)."""

        def ours(hello: Hello) -> Hello:  # the leader's view, its id digests keyed by this follower's nonce
            step = hello.resume_step if self.rejoin_auto else self.start_step  # --resume auto: agreed below
            return hello_message(self.cfg, self.party.shard, step, hello.nonce)

        hellos: dict[str, Hello] = self.session.greet(
            Hello,
            lambda f, hello: hello_problems(f, hello, ours(hello)) + rank_problems(f, hello, self.ctx.env),
            lambda f: f"HELLO from follower {f} (is it running and pointed at {self.cfg.network.bind}?)",
        )
        if self.rejoin_auto:
            self._agree_on_start({f: h.resume_step for f, h in hellos.items()})
        tr = self.cfg.train
        fixed = 0 if tr.staleness == "auto" else tr.staleness  # auto: the warning speaks of the synchronous step
        if self.ctx.env.is_main:
            announce(self.session.links, tr.batch_size, fixed, self.log)
        if check_link:
            for f, link in self.session.check_links().items():
                self.log(check_report(f, link, self.session.cut_dims[f], tr.batch_size, fixed))
            raise LinkCheckDone("link check only (--check-link): the followers were told, nothing was trained")
        steps = steps_per_epoch(len(self.party.train_split), self.cfg.train.batch_size)
        if tr.staleness == "auto":
            self._choose_staleness(steps)
        self.session.start_run(
            {f: h.nonce for f, h in hellos.items()},
            lambda f: Welcome(
                run=self.ch.run,
                nonce=hellos[f].nonce,
                epochs=self.cfg.train.epochs,
                steps_per_epoch=steps,
                **self._sends_per_row(steps),
                **rank_meta(self.ctx.env),
                staleness=self.cfg.train.staleness or None,
            ),
        )
        # network.reconnect_s: from here a lost follower is waited for and resynchronised (vfl/wire/resync.py)
        self.exchange.steps_per_epoch = steps
        self.ch.resync.reconnect_s = self.cfg.network.reconnect_s
        self.ch.resync.resume_hint = self._resume_hint
        self.ch.while_waiting = self.session.keepalive  # the other followers' deadlines while one is waited for

    def _choose_staleness(self, steps: int) -> None:
        """train.staleness auto: K from the slowest follower's measured round trip, this party's step time and the
        run's length (vfl/training/staleness_auto.py), logged with its reasons and cost; the welcome names it."""
        tr = self.cfg.train
        rows = batch_order(len(self.party.train_split), tr.batch_size, tr.seed, 0)[0]
        step_s = time_bottom_step(self.party, tr, rows, keepalive=self.session.keepalive) * STEP_FACTOR
        slowest = max(self.session.links.values(), key=lambda link: link.rtt_s)
        known = [x for link in self.session.links.values() for x in (link.down, link.up) if x is not None]
        cut = 4.0 * max(self.cut_dims.values())  # float32 bytes a sample each way
        total = tr.epochs * steps
        segment = min(steps, tr.eval_every_steps or steps, tr.checkpoint_every or steps)
        self.staleness_choice = choose_staleness(
            slowest.rtt_s, step_s, tr.batch_size, total - self.start_step, segment, min(known, default=math.inf),
            cut, cut,
        )  # fmt: skip
        self.log(self.staleness_choice.describe())
        self.cfg = self.cfg.model_copy(
            update={"train": tr.model_copy(update={"staleness": self.staleness_choice.staleness})}
        )

    def _agree_on_start(self, theirs: dict[str, int]) -> None:
        """--resume auto: every party resumes from the same step, or all start again from the smallest (REJOIN)."""
        steps = {self.cfg.party: self.start_step, **theirs}
        common = common_start(steps)
        if common is None:
            return
        self.log(disagreement_line(steps, common))
        self.ch.rejoin_all(common)
        raise RejoinRequested(common)

    def _resume_hint(self) -> str:
        """What a run that cannot go on resumes from (the line a party prints when a lost peer does not come back)."""
        if self.last_checkpoint is None:
            return "no checkpoint was written yet (train.checkpoint_every): start the run again"
        step, path = self.last_checkpoint
        return (
            f"resume every party from its checkpoint of step {step} (this party's: {path}; --resume PATH with the "
            "same --epochs)"
        )

    def _sends_per_row(self, steps: int) -> dict[str, int]:
        """WELCOME's sends per row of each split from the start step to the run's end (the followers' embedding DP
        calibrates for them: vfl/training/sends_per_row.py)."""
        tr, rel = self.cfg.train, self.release
        all_party_prior = self.task.kind == "multiclass" and rel is not None and rel.uses_prior  # as prepare()'s
        sends = sends_per_row(
            tr.epochs, steps, tr.eval_every_steps, self.start_step, restores=tr.early_stopping is not None,
            prior_epochs=rel.prior_epochs if all_party_prior else 0,
        )  # fmt: skip
        return {f"sends_{split}": count for split, count in sends.items()}

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
        self._check_resume_release()
        self.label_digests = self.ctx.same_on_every_rank(
            "the training labels (noisy under label DP)",
            np.ascontiguousarray(self.labels.labels, "<f4").tobytes()
            + np.ascontiguousarray(self.labels.valid, "<f8" if self.task.is_regression else "<i8").tobytes(),
        )
        cuts = (self.party.cut_dim, *(self.cut_dims[f] for f in self.followers))  # each party's cut, leader first
        self.top = build_top(self.cfg, self.party, cuts, rel, self.task, self.labels)
        self.loop = build_loop(self.cfg, self.party, self.log, self.labels, rel, self.task)
        if self.resume:
            self.top.load_state(self.resume["state"]["top"], resume=True)
            self.loop.load_state((self.resume.get("extra") or {}).get("loop") or {})
            self.log(f"resumed from {self.cfg.train.resume_from} at global step {self.start_step}")
        if self.ctx.is_main:  # curves, like checkpoints and metrics.json, are rank 0's
            self.loop.curves = RunCurves(
                self.out_dir, self.cfg.party, self.start_step, log=self.log, regression=self.task.is_regression
            )
        if self.rejoin_auto and not self.cfg.train.checkpoint_every:  # about a minute of training lost at most
            self.loop.checkpoint_seconds = AUTO_CHECKPOINT_S
            self.log(
                f"--resume auto: train.checkpoint_every unset, so a checkpoint after each step that ends "
                f"{AUTO_CHECKPOINT_S:g} s or more after the last one (at evaluations and epoch ends under staleness)"
            )
        if self.ctx.ranks > 1:
            self.loop.agree = self.ctx.agree_selection
            self.top.train_model = self.ctx.wrap(self.top.model)
        self._keepalive()  # TensorBoard's import takes seconds: followers with short deadlines hear from us

    def _check_resume_release(self) -> None:
        """A resumed run must train on the very release its checkpoint was trained on."""
        if not self.resume:
            return
        saved = (self.resume.get("extra") or {}).get("label_dp_release")
        now = self.labels.release
        if saved != now:
            raise ValueError(
                f"train.resume_from {self.cfg.train.resume_from!r} was trained on label-DP release {saved!r}, "
                f"but this run's labels are release {now!r} (another key, eps, mechanism or prior); "
                "resuming would mix two releases of the same labels: start a fresh run instead"
            )

    # -- training ----------------------------------------------------------------------------
    def train(self) -> None:
        labels = torch.from_numpy(self.labels.labels)
        train_ids = self.party.train_split.ids
        TIMER.watch(self.party.device)
        TIMER.reset()  # the breakdown covers the main training only (not LP-2ST's stage one)
        stale = self._stale_schedule() if self.cfg.train.staleness else None  # None: the synchronous step

        def step(epoch: int, i: int, batch: np.ndarray) -> float:
            if stale is not None:
                return self._stale_step(stale, epoch, i, batch, labels)
            rows = self.ctx.rows(batch)  # this rank's slice of the global batch (all of it for one rank)
            self.exchange.forward_all(epoch, i, train_ids[rows])
            parts = micro_slices(rows.size, self.cfg.train.microbatches)
            value, total = 0.0, 0.0
            # each follower sends its M embeddings before its first gradient: up to M of one follower's arrive while
            # the leader awaits another's (M = 1: one ahead, as outside a step)
            widest = max(part.stop - part.start for part in parts)  # micro_slices: sizes differ by one at most
            bound = embedding_bytes_bound(widest, [self.cut_dims[f] for f in self.followers])
            with pipelined(self.ch, len(parts), bound):
                for j, part in enumerate(parts):  # M = 1: the whole batch, exactly as without micro-batches
                    share, total = self._micro_step(
                        epoch, i, j, rows[part], rows.size, batch.size, labels, j + 1 == len(parts), value
                    )
                    value += share
            self.top.step()
            self.party.step_optimizer()
            self.local_samples += rows.size
            return total

        self.loop.run(
            step,
            _drained(stale, self.evaluate, "an evaluation"),
            _drained(stale, lambda epoch, gs: self.checkpoint(epoch, gs, f"step{gs}"), "a checkpoint"),
            self.start_step,
            _drained(stale, self.snapshot, "a snapshot"),
            _drained(stale, self.restore, "a restore"),
        )

    def _stale_schedule(self) -> StalenessSchedule:
        """train.staleness K > 0: the schedule (which batches to start when; drained at every pause of the loop) and,
        under train.staleness_leader_bottom stale, the stash of the leader's own in-flight cuts (weights as old as the
        followers'); fresh (the default) keeps the leader's own bottom synchronous."""
        tr = self.cfg.train
        spe = steps_per_epoch(len(self.party.train_split), tr.batch_size)
        correction = correction_for(tr, self.party)
        # staleness_leader_bottom fresh: the leader's own bottom runs synchronously at each batch's step, unstashed
        self.stash = WeightStash(self.party, correction) if tr.staleness_leader_bottom == "stale" else None
        self._orders = {}
        self.log(
            f"train.staleness {tr.staleness}: up to {tr.staleness} batches start before the gradient of the oldest "
            f"returns ({tr.staleness + 1} in flight), drained at every evaluation, checkpoint and epoch end; "
            f"correction {tr.staleness_correction}; the leader's own bottom {tr.staleness_leader_bottom}"
        )
        return StalenessSchedule(
            tr.staleness, spe, lambda epoch, i: pauses_after(tr, spe, tr.epochs * spe, epoch * spe + i + 1, i)
        )

    def _stale_step(
        self, stale: StalenessSchedule, epoch: int, i: int, rows: np.ndarray, labels: torch.Tensor
    ) -> float:
        """Step i of `epoch` under train.staleness K: start every batch up to K ahead that is not in flight yet
        (FORWARD to each follower; the leader's own cut from its weights of now when its bottom is stale), train the top
        on batch i's cuts as they arrive, return their gradients, then apply the leader's own: a fresh bottom's
        computed now (synchronous), a stale one's through its stash (delayed SGD, with its correction)."""
        tr = self.cfg.train
        if epoch not in self._orders:
            self._orders = {epoch: batch_order(len(self.party.train_split), tr.batch_size, tr.seed, epoch)}
        for e, s in stale.to_forward(epoch, i):
            ahead = self._orders[e][s]
            self.exchange.forward_all(e, s, self.party.train_split.ids[ahead])
            if self.stash is not None:
                self.stash.forward(ahead)
            stale.window.forwarded((e, s))
        own = self.stash.oldest_cut if self.stash is not None else self.party.forward_train(rows)
        own_leaf = own.detach().requires_grad_(True)
        # while the leader awaits one follower's cut of batch i, another's cuts of i .. i + K may arrive
        bound = embedding_bytes_bound(rows.size, [self.cut_dims[f] for f in self.followers])
        with pipelined(self.ch, stale.window.depth, bound):
            remote = self.exchange.cuts(epoch, i, rows.size, micro=0)
        with TIMER.part("top"):
            loss = self.top.loss([own_leaf, *remote], labels[rows])
            value = float(loss.detach())
            if not math.isfinite(value):  # before anything is sent: the followers get a clean ABORT
                raise FloatingPointError(f"training loss became {value} at epoch {epoch} step {i + 1}; lower train.lr")
            loss.backward()
        self.exchange.gradients(epoch, i, remote, rows, micro=0)
        stale.window.applied((epoch, i))
        self.top.step()
        if self.stash is not None:  # backward through the stashed weights, corrected, applied (weight_stash.apply)
            self.stash.apply(own_leaf.grad)
        else:
            self.party.apply_gradient(own_leaf.grad)
        self.local_samples += rows.size
        return value

    def _micro_step(
        self,
        epoch: int,
        i: int,
        j: int,
        rows: np.ndarray,
        batch_rows: int,
        global_rows: int,
        labels: torch.Tensor,
        last: bool,
        loss_so_far: float,
    ) -> tuple[float, float]:
        """Micro-batch j of step i: own bottom, the followers' cuts j, the top; gradients j go back at once.
        batch_rows: this rank's slice of the global batch of global_rows. Returns (this micro-batch's share of
        the slice's loss, the global batch's mean loss once known: with the last micro-batch, else nan)."""
        own = self.party.forward_train(rows)
        own_leaf = own.detach().requires_grad_(True)
        remote = self.exchange.cuts(epoch, i, rows.size, micro=j)
        with TIMER.part("top"):
            loss = self.top.loss([own_leaf, *remote], labels[rows])
            scaled = weighted_loss(loss, rows.size, batch_rows)
            value = float(scaled.detach())
            # N ranks: the mean over the global batch (an all-reduce every rank joins; identity for one rank)
            total = self.ctx.global_loss(loss_so_far + value, batch_rows, global_rows) if last else math.nan
            if not math.isfinite(total if last else value):  # before anything is sent: the followers get a clean ABORT
                raise FloatingPointError(
                    f"training loss became {total if last else value} at epoch {epoch} step {i + 1}; lower train.lr"
                )
            if self.ctx.ranks > 1:  # N n_r / B: DDP's average over ranks is then the global batch's gradient
                scaled = scaled * self.ctx.loss_weight(batch_rows, global_rows)
            scaled.backward()  # top only: the followers' gradients are ready before the leader's bottom runs
        self.exchange.gradients(epoch, i, remote, rows, micro=j)
        self.party.accumulate_gradient(own_leaf.grad, j)  # overlaps with the followers' backward passes
        return value, total

    def snapshot(self, step: int) -> int:
        """Every party keeps a copy of its weights and optimizer state at this (best so far) step."""
        for f in self.followers:
            self.ch.post(f, Snapshot(step=step))
        return self.party.snapshot(step) + self.top.snapshot(step)

    def restore(self, step: int) -> None:
        """Every party goes back to its snapshot of the best step (chosen on randomized validation labels)."""
        for f in self.followers:
            self.ch.post(f, Restore(step=step))
        self.party.restore(step)
        self.top.restore(step)
        self.codecs.reset()  # top-k's residuals belong to the discarded steps
        self.restored_step = step

    @torch.no_grad()
    def evaluate(self, split: str) -> np.ndarray:
        """Predicted click (n,) or class (n, K) probabilities, or values (n,), on the valid or test split (scored on
        the leader only)."""
        n = len(self.party.valid_split if split == "valid" else self.party.test_split)
        lo, hi = self.ctx.eval_range(n)  # N ranks: each scores its contiguous part, gathered below
        probs = np.empty(hi - lo if self.task.outputs == 1 else (hi - lo, self.task.outputs))
        for part in track(
            eval_batches(hi - lo, self.cfg.train.eval_batch_size), desc=f"evaluate {split}", unit="batch"
        ):
            sl = slice(lo + part.start, lo + part.stop)
            ids = (self.party.valid_split if split == "valid" else self.party.test_split).ids[sl]
            self.exchange.eval_all(split, sl.start, sl.stop, ids)  # the followers compute while the leader does
            cuts = [self.party.forward_eval(sl, split), *self.exchange.eval_cuts(split, sl.start, sl.stop)]
            probs[part] = self.top.predict(cuts)
        return self.ctx.gather_rows(probs, n)

    # -- end of run ----------------------------------------------------------------------------
    def checkpoint(self, epoch: int, step: int, tag: str) -> str:
        for f in self.followers:
            self.ch.post(f, Save(tag=tag, epoch=epoch, step=step))
        path = os.path.join(self.out_dir, "checkpoints", f"{self.cfg.party}_{tag}.pt")
        if not self.ctx.is_main:  # every rank holds the same weights: rank 0 writes the party's checkpoint
            return path
        state = {"bottom": self.party.state(), "top": self.top.state()}
        extra = {
            "label_dp_release": self.labels.release,
            "label_dp_key": self.labels.report["key_fingerprint"] if self.labels.report else None,
            "loop": self.loop.state(),
            "cut_dims": {self.cfg.party: self.party.cut_dim, **self.cut_dims},  # the top's inputs, leader first
            # the training run, the step whose weights these are, parties, keys: prediction's fingerprint
            "run": run_record(
                self.cfg,
                self.ch.run,
                step if self.restored_step is None else self.restored_step,
                {self.cfg.party: self.party.cut_dim, **self.cut_dims},
                self.key_fingerprints,
            ),
        }
        save_checkpoint(path, self.cfg.party, state, epoch, step, extra, resume_identity(self.cfg))
        self.last_checkpoint = (step, path)
        return path

    def finish(self, epoch: int, step: int) -> None:
        self.checkpoint(epoch, step, "final")
        for f in self.followers:
            self.ch.post(f, Done(epoch=epoch, step=step))
        self.ch.watch_disconnect = False  # followers leave once they said BYE
        for f in self.followers:
            bye: Bye = self.ch.expect(f, Bye)
            self.follower_snapshot_bytes[f] = bye.snapshot_bytes

    def metrics(self) -> dict:
        n_train, n_test, evals = len(self.party.train_split), len(self.party.test_split), len(self.loop.history)
        n_valid = len(self.party.valid_split)
        sent, received = self.ch.bytes_sent - self._wire_at_start[0], self.ch.bytes_received - self._wire_at_start[1]
        samples_moved = self.loop.samples + (n_valid + n_test) * evals
        return {
            **self.loop.summary(),
            "label_dp": self.labels.report,
            "bayes_test_auc": self.party.shard.manifest.get("bayes_test_auc"),
            **bayes_accuracy_of(self.party.shard.manifest),
            "parties": [self.cfg.party, *self.followers],
            "cut_dims": {self.cfg.party: self.party.cut_dim, **self.cut_dims},
            "rows": {"train": n_train, "valid": n_valid, "test": n_test},
            "snapshot_bytes": {self.cfg.party: self.loop.snapshot_bytes, **self.follower_snapshot_bytes},
            "wire": {
                "bytes_from_leader": sent,
                "bytes_to_leader": received,
                "bytes_from_leader_per_sample": sent / max(samples_moved, 1),
                "bytes_to_leader_per_sample": received / max(samples_moved, 1),
            },
            # bytes each way per training sample (EVAL's cuts and every header included), under network.compression
            "wire_bytes_per_sample": {
                "up": received / max(self.loop.samples, 1),
                "down": sent / max(self.loop.samples, 1),
            },
            "compression": {
                "embedding": self.codecs.embedding.agreement or "none",
                "gradient": self.codecs.gradient.agreement or "none",
            },
            "run_id": self.ch.run,
            "mode": "split",
            "precision": self.cfg.train.precision,
            "microbatches": self.cfg.train.microbatches,
            "staleness": self.cfg.train.staleness,
            "staleness_auto": self.staleness_choice.as_dict() if self.staleness_choice is not None else None,
            "staleness_correction": self.cfg.train.staleness_correction,
            "staleness_leader_bottom": self.cfg.train.staleness_leader_bottom,
            "step_breakdown": TIMER.report(),
            **self.rank_metrics(),
        }

    def rank_metrics(self) -> dict:
        """ranks, per-rank and total samples/s, wire bytes of every rank (collectives: every rank calls it)."""
        seconds = max(self.loop.train_seconds, 1e-9)
        per_rank = self.ctx.per_rank(self.local_samples / seconds)
        return {
            "ranks": self.ctx.ranks,
            "samples_per_second_per_rank": per_rank,
            "samples_per_second_total": sum(per_rank),
            "label_digests_per_rank": self.label_digests,
            "wire_bytes_all_ranks": self.ctx.total(self.ch.bytes_sent + self.ch.bytes_received),
        }


def _drained(stale: StalenessSchedule | None, call, what: str):
    """`call`, which under train.staleness first checks that no training batch is in flight (the schedule drains
    before every pause of the loop, so a failure here is a bug of the schedule, never a wrong model)."""
    if stale is None:
        return call

    def checked(*args):
        stale.window.require_drained(what)
        return call(*args)

    return checked
