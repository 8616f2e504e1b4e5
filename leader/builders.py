"""What LeaderTrainer.prepare builds once the followers' cuts are known: the training labels, the top, the loop."""

from __future__ import annotations

from collections.abc import Callable

from vfl.config.schema import PartyConfig
from vfl.data.shards import steps_per_epoch
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, LabelKey, PriorFn, TrainingLabels, leader_training_labels
from vfl.training.loop import TrainingLoop
from vfl.training.party import BottomParty
from vfl.training.top import TopTrainer, regression_target


def label_dp_line(report: dict | None) -> str:
    """The log line of the training labels: the release drawn (label DP) or that the labels are the true ones."""
    if report is None:  # said once, so that a YAML's label DP switched off on the command line (=false) is never silent
        return "label DP: off (privacy.label_dp unset or false): the followers' gradients come from the true labels"
    r = report
    changed = (  # a real-valued label: how far the noise moved it (every value changes)
        f"noise RMSE {r['noise_rmse']:.4g} on the training labels"
        if "noise_rmse" in r
        else f"flipped {r['flipped_fraction']:.4f} of training labels"
    )
    return (
        f"label DP: {r['mechanism']} eps={r['eps']} once per sample for this release "
        f"({'new' if r['new_release'] else 'reused'} release {r['release_id'][:12]}, key {r['key_fingerprint']}); "
        f"{changed}; debias={r.get('debias', False)}; "
        f"dataset total eps {r['dataset_total_eps']} over {r['dataset_releases']} release(s)"
    )


def randomized_labels(
    release: LabelDPRelease | None,
    party: BottomParty,
    prior_fn: PriorFn | None,
    label_key: LabelKey | None,
    log: Callable[[str], None],
) -> TrainingLabels:
    """The leader's training and validation labels (noisy under label DP; LP-2ST trains its prior in prior_fn), its
    store's warnings and the labels' log line logged."""
    labels = leader_training_labels(release, party.shard, prior_fn, label_key)
    for w in labels.warnings:
        log(w)
    log(label_dp_line(labels.report))
    return labels


def build_top(
    cfg: PartyConfig,
    party: BottomParty,
    cut_dims: tuple[int, ...],
    release: LabelDPRelease | None,
    task: Task,
    labels: TrainingLabels,
) -> TopTrainer:
    """The top over every party's cut (cut_dims: the leader's first), with the label-DP release's corrected loss."""
    tr = cfg.train
    return TopTrainer(
        tr,
        cfg.model.top,
        cut_dims,
        party.device,
        loss_fn=release.training_loss() if release is not None else None,
        total_steps=tr.epochs * steps_per_epoch(len(party.train_split), tr.batch_size),
        task=task,
        target=regression_target(labels.labels) if task.is_regression else None,
    )


def build_loop(
    cfg: PartyConfig,
    party: BottomParty,
    log: Callable[[str], None],
    labels: TrainingLabels,
    release: LabelDPRelease | None,
    task: Task,
) -> TrainingLoop:
    """The training loop, selecting on the (randomized under label DP) validation labels."""
    loop = TrainingLoop(
        cfg.train,
        len(party.train_split),
        party.test_split.labels,
        log,
        labels.valid,
        release.eps if release is not None else None,
        task,
    )
    loop.valid_noise_var = labels.valid_noise_var  # regression label DP: debiases the valid RMSE
    return loop
