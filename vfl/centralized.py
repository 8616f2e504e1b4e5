"""The same split model trained in one process without ZeroMQ: the correctness and speed reference.

`python -m vfl.centralized --config leader.yaml --follower-config follower.yaml [...] [--out DIR]`
builds every party's bottom exactly as the split run does (same per-party seeds, same batch
order, same optimizers, same label function) so that its per-step losses are the anchor that
split training must reproduce.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from vfl.command_name import command_name
from vfl.obs.logs import RunLog, set_verbosity

if TYPE_CHECKING:  # imported after the arguments parse: `--help` stays instant
    from vfl.config.schema import PartyConfig


def _aligned_parties(leader_cfg, follower_cfgs, device, log: RunLog) -> tuple:
    """Every party's shard restricted to the ids all share (intersected in the clear: the reference holds every
    shard; split runs agree on the same intersection privately, vfl/align/psi), checked to agree as HELLO would,
    and each party's BottomParty: (the leader's shard, [leader, *followers])."""
    import numpy as np

    from vfl.data.errors import DataError
    from vfl.data.shards import PartyShard
    from vfl.session.handshake import hello_message, hello_problems, new_nonce
    from vfl.training.party import BottomParty

    leader_shard = PartyShard(leader_cfg.data.path)
    if not leader_shard.has_labels:
        raise DataError(f"{leader_cfg.data.path} holds no labels; the leader config must point at the labelled shard")
    shards = [PartyShard(fc.data.path) for fc in follower_cfgs]
    common = leader_shard.all_ids()
    for shard in shards:
        common = np.intersect1d(common, shard.all_ids())
    if common.size < leader_cfg.data.min_intersection:
        raise DataError(
            f"the parties share {common.size} ids, below data.min_intersection={leader_cfg.data.min_intersection}"
        )
    for shard in (leader_shard, *shards):
        shard.restrict(common)
    log(f"centralized: intersection of the parties' ids: {common.size}")
    parties = [BottomParty(leader_cfg, leader_shard, device)]
    nonce = new_nonce()  # keys the id digests compared, as a HELLO's nonce does
    ours = hello_message(leader_cfg, leader_shard, 0, nonce)
    problems = []
    for fc, shard in zip(follower_cfgs, shards):
        problems += hello_problems(fc.party, hello_message(fc, shard, 0, nonce), ours)
        parties.append(BottomParty(fc, shard, device))
    if problems:
        raise DataError("; ".join(problems))
    return leader_shard, parties


class _Reference:
    """Every party's bottom and the top in one process: the split run's step, evaluation and snapshots, no wire."""

    def __init__(self, parties: list, top, labels, train_cfg, task):
        self.parties, self.top, self.labels, self.tr, self.task = parties, top, labels, train_cfg, task

    def step(self, epoch: int, i: int, rows):
        """One synchronous step on batch `rows`, cut into the split run's micro-batches; the batch's mean loss."""
        from vfl.training.microbatch import micro_slices, weighted_loss
        from vfl.training.step_timer import TIMER

        value = 0.0
        for part in micro_slices(rows.size, self.tr.microbatches):  # as the split parties cut the batch
            cuts = [p.forward_train(rows[part]) for p in self.parties]
            with TIMER.part("top"):
                loss = weighted_loss(self.top.loss(cuts, self.labels[rows[part]]), rows[part].size, rows.size)
            with TIMER.part("backward"):
                loss.backward()
            value += float(loss.detach())
        for p in self.parties:
            p.step_optimizer()
        self.top.step()
        return value

    def evaluate(self, split: str):
        """Predicted probabilities on the valid or test split, (n,) or (n, K), or predicted values (n,)."""
        import numpy as np
        import torch

        from vfl.data.shards import eval_batches

        n = len(self.parties[0].valid_split if split == "valid" else self.parties[0].test_split)
        probs = np.empty(n if self.task.outputs == 1 else (n, self.task.outputs))
        with torch.no_grad():
            for sl in eval_batches(n, self.tr.eval_batch_size):
                probs[sl] = self.top.predict([p.forward_eval(sl, split) for p in self.parties])
        return probs

    def snapshot(self, step: int) -> int:
        return sum(p.snapshot(step) for p in self.parties) + self.top.snapshot(step)

    def restore(self, step: int) -> None:
        for p in self.parties:
            p.restore(step)
        self.top.restore(step)


def _training_labels(leader_cfg, follower_cfgs, leader_shard, parties, task, device, log):
    """The release and the leader's training labels, with LP-2ST's stage one over all parties for K classes, exactly
    as the split leader runs it."""
    from vfl.labeldp.prior import LocalCutSource, fit_predict_all_parties, prior_config, prior_fn_for
    from vfl.labeldp.release import LabelDPRelease, leader_training_labels
    from vfl.training.party import BottomParty

    release = LabelDPRelease.from_config(leader_cfg.privacy.label_dp, task)
    prior_fn = prior_fn_for(leader_cfg, release, parties[0])
    if task.kind == "multiclass" and release is not None and release.uses_prior:

        def prior_fn(first, noisy):
            sources = [
                LocalCutSource(BottomParty(prior_config(c, release.prior_epochs), p.shard, device))
                for c, p in zip((leader_cfg, *follower_cfgs), parties)
            ]
            cut = sum(p.cut_dim for p in parties)
            return fit_predict_all_parties(leader_cfg, release, sources, cut, device, first.size, first, noisy, log)

    labels_info = leader_training_labels(release, leader_shard, prior_fn)
    for w in labels_info.warnings:
        log(w)
    return release, labels_info


def train_centralized(leader_cfg: PartyConfig, follower_cfgs: list[PartyConfig], out_dir: str, log: RunLog) -> dict:
    """Train all bottoms and the top in-process; write and return metrics.json."""
    import torch

    from vfl.config.schema import ConfigError
    from vfl.data.shards import steps_per_epoch
    from vfl.labeldp.release import bayes_accuracy_of, leader_task
    from vfl.obs.curves import RunCurves
    from vfl.obs.metrics import write_json
    from vfl.training.loop import TrainingLoop
    from vfl.training.party import resolve_device, set_threads
    from vfl.training.precision import warn_if_emulated
    from vfl.training.step_timer import TIMER
    from vfl.training.top import TopTrainer, regression_target

    if any(c.train.resume_from for c in (leader_cfg, *follower_cfgs)):
        raise ConfigError("train.resume_from is for split runs; the centralized reference always starts from step 0")
    names, expected = [f.party for f in follower_cfgs], list(leader_cfg.network.followers)
    if expected != names:
        raise ConfigError(f"follower configs {names} must match the leader's network.followers {expected} in order")
    tr = leader_cfg.train
    # the split run's per-party share of the cores (each party a process): on small batches more intra-op threads
    # only wait on each other (a 2-party caravan run: 2,338 samples/s on 2 threads, 32,193 on 1, split 18,471)
    set_threads(tr.threads, 1 + len(follower_cfgs))
    device = resolve_device(tr.device)
    warn_if_emulated(tr.precision, device, log)
    leader_shard, parties = _aligned_parties(leader_cfg, follower_cfgs, device, log)
    task = leader_task(tr.task, leader_shard)
    release, labels_info = _training_labels(leader_cfg, follower_cfgs, leader_shard, parties, task, device, log)
    train, valid, test = parties[0].train_split, parties[0].valid_split, parties[0].test_split
    loss = release.training_loss() if release is not None else None
    steps = tr.epochs * steps_per_epoch(len(train), tr.batch_size)
    for party in parties[1:]:  # as a split follower: the leader's epochs size its lr schedule (WELCOME)
        party.optimizer.total_steps = steps
    target = regression_target(labels_info.labels) if task.is_regression else None
    top = TopTrainer(
        tr,
        leader_cfg.model.top,
        tuple(p.cut_dim for p in parties),
        device,
        loss_fn=loss,
        total_steps=steps,
        task=task,
        target=target,
    )
    eps = release.eps if release is not None else None
    loop = TrainingLoop(tr, len(train), test.labels, log, labels_info.valid, eps, task)
    loop.valid_noise_var = labels_info.valid_noise_var  # regression label DP: debiases the valid MSE, as the leader
    loop.curves = RunCurves(out_dir, "centralized", log=log, regression=task.is_regression)
    ref = _Reference(parties, top, torch.from_numpy(labels_info.labels), tr, task)
    TIMER.reset()
    TIMER.watch(device)
    loop.run(ref.step, ref.evaluate, None, 0, ref.snapshot, ref.restore)
    loop.curves.close(loop.final["model_step"], leader_shard.manifest.get("bayes_test_auc"))
    metrics = {
        **loop.summary(),
        "label_dp": labels_info.report,
        "bayes_test_auc": leader_shard.manifest.get("bayes_test_auc"),
        **bayes_accuracy_of(leader_shard.manifest),
        "parties": [p.name for p in parties],
        "cut_dims": {p.name: p.cut_dim for p in parties},
        "rows": {"train": len(train), "valid": len(valid), "test": len(test)},
        "mode": "centralized",
        "precision": tr.precision,
        "microbatches": tr.microbatches,
        "step_breakdown": TIMER.report(),
    }
    write_json(os.path.join(out_dir, "metrics.json"), metrics)
    return metrics


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=command_name("vfl.centralized"), description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the leader's YAML")
    ap.add_argument(
        "--follower-config", action="append", required=True, help="each follower's YAML, in network.followers order"
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("-q", "--quiet", action="store_true", help="console: warnings and errors only")
    ap.add_argument("-v", "--verbose", action="store_true", help="console: debug lines too, with timestamps")
    ap.add_argument("overrides", nargs="*", metavar="key.path=value", help="set a config key of every party")
    args = ap.parse_intermixed_args(argv)
    set_verbosity(args.quiet, args.verbose)
    from vfl.config.schema import ConfigError, dotted_overrides, load_config

    try:
        overrides = {
            **({"train.epochs": args.epochs} if args.epochs is not None else {}),
            **dotted_overrides(args.overrides),
        }
        leader_cfg = load_config(args.config, {**overrides, **({"output.dir": args.out} if args.out else {})})
        follower_cfgs = [load_config(p, overrides) for p in args.follower_config]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out_dir = leader_cfg.output.dir
    os.makedirs(out_dir, exist_ok=True)
    log = RunLog(os.path.join(out_dir, "centralized.log"), "centralized")
    from vfl.data.errors import DataError
    from vfl.preflight import preflight

    try:
        leader_cfg = preflight(leader_cfg, log)
        follower_cfgs = [preflight(c, log) for c in follower_cfgs]
        m = train_centralized(leader_cfg, follower_cfgs, out_dir, log)
    except (ConfigError, DataError, FloatingPointError, RuntimeError, ValueError, OSError) as e:
        log.error(f"error: {' '.join(str(e).split())}")
        return 1
    from vfl.obs.metrics import final_line

    log(final_line(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
