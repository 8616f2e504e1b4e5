"""The label-DP mechanisms, one class each, in one registry keyed by (task, `privacy.label_dp.mechanism`).

A mechanism says which releases it plans (from the leader's config alone, before any follower connects) and how it
draws them; `LabelDPRelease` (vfl/labeldp/release.py) looks its own up (`mechanism_for`) and records each release in
the ledger before anything of it is drawn (the `ledger` of a `DrawRequest`: privacy/label/ledger/recording.py). The
keys are the pairs the config allows
(vfl/config/label_dp_rules.py's LABEL_DP_MECHANISMS, which the task and the schema read too): `register` refuses any
other, and importing this module fails when a pair the config allows has no mechanism.

    binary      rr (binary RR), rr_prior (LP-2ST, a prior of the leader's columns)
    multiclass  rr (k-ary RR), rr_prior (LP-2ST, a split model of all parties as its prior)
    regression  laplace, rr_on_bins, unbiased (privacy/label/regression_release.py)

What each plans is privacy/label/release_plans.py's. LP-2ST's stage-two release is named by its stage-one release and
the leader's `prior_epochs`, never by the prior's values, which the followers' bottoms shape: its first prior is kept in the store (privacy/label/ledger/prior_store.py) and
every later run reuses it, so the same release id always gives the same noisy labels and a follower changing its own
settings (its learning rate, say) makes the leader release nothing new.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from privacy.label import release_plans
from privacy.label.ledger.prior_store import priors_of
from privacy.label.ledger.recording import ReleaseLedger
from privacy.label.regression_release import Drawn, draw_regression, store_matrices
from privacy.label.release_draws import (
    randomize_binary_once,
    randomize_classes_once,
    rr_prior_classes_once,
    rr_prior_once,
    stage_one_mask,
)
from privacy.label.release_plans import Plan, RegressionSpec
from vfl.config.label_dp_rules import LABEL_DP_MECHANISMS
from vfl.labeldp.label_key import LabelKey

PriorFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class ReleaseParams(Protocol):
    """What a mechanism reads of its release (LabelDPRelease): the numbers of `privacy.label_dp`."""

    eps: float
    mechanism: str
    num_classes: int | None
    debias: bool
    correction: str
    prior_fraction: float
    prior_epochs: int
    regression: RegressionSpec | None


@dataclass(frozen=True)
class DrawRequest:
    """The labels one release randomizes (training, and validation in the same release), the leader's key, LP-2ST's
    stage-one prior model (None elsewhere) and the ledger that records each planned release before it is drawn."""

    labels: np.ndarray
    ids: np.ndarray
    valid_labels: np.ndarray
    valid_ids: np.ndarray
    label_key: LabelKey
    prior_fn: PriorFn | None
    ledger: ReleaseLedger


class LabelDPMechanism:
    """One label-DP mechanism: registered for each (task, name) of `tasks` x `names`; real_valued: it randomizes
    regression labels."""

    tasks: ClassVar[tuple[str, ...]] = ()
    names: ClassVar[tuple[str, ...]] = ()
    real_valued: ClassVar[bool] = False

    def plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        """The releases this mechanism draws, before the label set names them (`named_plan`)."""
        raise NotImplementedError

    def draw(self, release: ReleaseParams, request: DrawRequest) -> Drawn:
        """Record the planned releases and draw the noisy training and validation labels."""
        raise NotImplementedError

    def named_plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        """The plan with every entry's parameters named by the label set (LabelKey.label_set)."""
        return label_key.names.plan(self.plan(release, label_key))


# (task kind, privacy.label_dp.mechanism) -> its mechanism
MECHANISMS: dict[tuple[str, str], LabelDPMechanism] = {}


def register(cls: type[LabelDPMechanism]) -> type[LabelDPMechanism]:
    """Add the mechanism under each of its (task, name) pairs; ValueError for a pair the config does not allow or one
    already taken."""
    for task in cls.tasks:
        for name in cls.names:
            if name not in LABEL_DP_MECHANISMS.get(task, ()):
                raise ValueError(
                    f"{cls.__name__}: ({task}, {name}) is not a mechanism the config allows "
                    "(vfl/config/label_dp_rules.py, LABEL_DP_MECHANISMS)"
                )
            if (task, name) in MECHANISMS:
                raise ValueError(f"{cls.__name__}: ({task}, {name}) is registered already")
            MECHANISMS[(task, name)] = cls()
    return cls


def mechanism_for(task: str, name: str) -> LabelDPMechanism:
    """The registered mechanism of (task kind, privacy.label_dp.mechanism)."""
    return MECHANISMS[(task, name)]


def _corrected(release: ReleaseParams) -> dict:
    return {"debias": release.debias, "correction": release.correction if release.debias else None}


class _PlainRR(LabelDPMechanism):
    """Randomized response on every row, training and validation, in one release."""

    def randomize(
        self, release: ReleaseParams, labels: np.ndarray, ids: np.ndarray, key: bytes, rel: str
    ) -> np.ndarray:
        raise NotImplementedError

    def extra(self, release: ReleaseParams) -> dict:
        return _corrected(release)

    def draw(self, release: ReleaseParams, request: DrawRequest) -> Drawn:
        r, key = request, request.label_key.key
        ((mechanism, params),) = plan = self.named_plan(release, r.label_key)
        recorded, (noisy, valid_noisy) = r.ledger.record_and_draw(
            plan,
            lambda rel: (
                self.randomize(release, r.labels, r.ids, key, rel),
                self.randomize(release, r.valid_labels, r.valid_ids, key, rel),
            ),
        )
        return Drawn(
            recorded.release, mechanism, params, noisy, valid_noisy, self.extra(release), recorded.new, recorded.summary
        )


@register
class BinaryRR(_PlainRR):
    """Randomized response on 0/1 labels."""

    tasks, names = ("binary",), ("rr",)

    def plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        return release_plans.binary_rr(release.eps)

    def randomize(
        self, release: ReleaseParams, labels: np.ndarray, ids: np.ndarray, key: bytes, rel: str
    ) -> np.ndarray:
        return randomize_binary_once(labels, ids, release.eps, key, rel)


@register
class KaryRR(_PlainRR):
    """K-ary randomized response on class ids."""

    tasks, names = ("multiclass",), ("rr",)

    def plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        return release_plans.kary_rr(release.eps, release.num_classes)

    def randomize(
        self, release: ReleaseParams, labels: np.ndarray, ids: np.ndarray, key: bytes, rel: str
    ) -> np.ndarray:
        return randomize_classes_once(labels, ids, release.num_classes, release.eps, key, rel)

    def extra(self, release: ReleaseParams) -> dict:
        return {**_corrected(release), "num_classes": release.num_classes}


def _prior_digest(prior: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(prior, dtype="<f8").tobytes()).hexdigest()[:32]


@register
class LP2ST(LabelDPMechanism):
    """LP-2ST (Ghazi et al. 2021, Alg. 3): stage one gets plain RR, binary or k-ary (its own release); its model's
    predictions are the priors of RRWithPrior (Alg. 2) in stage two. Binary labels: a prior of the leader's columns;
    K classes: a split model of ALL parties (vfl/labeldp/prior.py). The first prior of each stage-two release is kept
    in the store and reused (module docstring)."""

    tasks, names = ("binary", "multiclass"), ("rr_prior",)

    def plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        return release_plans.lp2st(
            release.eps, release.prior_fraction, release.num_classes, release.prior_epochs, label_key.names.id_of
        )

    def draw(self, release: ReleaseParams, request: DrawRequest) -> Drawn:
        r, ids, labels = request, request.ids, request.labels
        key, eps, k = r.label_key.key, release.eps, release.num_classes
        if k is None:
            randomize = lambda y, i, rel: randomize_binary_once(y, i, eps, key, rel)
            with_prior = lambda y, i, prior, rel: rr_prior_once(y, i, prior, eps, key, rel)
        else:
            randomize = lambda y, i, rel: randomize_classes_once(y, i, k, eps, key, rel)
            with_prior = lambda y, i, prior, rel: rr_prior_classes_once(y, i, prior, eps, key, rel)
        plan = self.named_plan(release, r.label_key)
        # the ledger holds stage one (and the budget counts stage two) before anything is drawn: with K classes the
        # followers receive gradients of the stage-one labels while the prior trains, and a run stopped there has
        # still spent them
        _, (first, noisy, valid_noisy) = r.ledger.record_and_draw(
            plan,
            lambda rel: (
                stage_one_mask(ids, key, rel, release.prior_fraction),
                randomize(labels, ids, rel),
                randomize(r.valid_labels, r.valid_ids, rel),  # plain RR, like stage one
            ),
        )
        second = ~first
        mechanism, params = plan[1]
        prior2, reused = self._stage_two_prior(r.label_key, params, ids, first, noisy, r.prior_fn)
        recorded, (noisy2, k_star) = r.ledger.record_and_draw(
            plan[1:], lambda rel: with_prior(labels[second], ids[second], prior2, rel)
        )
        noisy[second] = noisy2
        collapse = float(np.mean(k_star == 1)) if k_star.size else 0.0
        extra = {
            "debias": False,
            "stage_one_fraction": float(first.mean()),
            "collapse_fraction": collapse,
            "collapsed": collapse > 0.5,
            "flipped_fraction_stage_two": float(np.mean(noisy2 != labels[second])) if second.any() else 0.0,
            "prior_sha256": _prior_digest(prior2),
            "prior_reused": reused,
        }
        if k is None:
            extra["prior"] = "leader-only columns (LP-2ST stage one, Ghazi et al. 2021 Alg. 3)"
        else:
            extra.update(
                num_classes=k,
                mean_k_star=float(k_star.mean()) if k_star.size else 0.0,
                stage_two_kept_in_set=float(np.mean(noisy2 == labels[second])) if second.any() else 0.0,
                prior="all parties (LP-2ST stage one as a split model on the stage-one rows, Ghazi et al. 2021 Alg. 3)",
            )
        return Drawn(recorded.release, mechanism, params, noisy, valid_noisy, extra, recorded.new, recorded.summary)

    @staticmethod
    def _stage_two_prior(label_key: LabelKey, params, ids, first, noisy, prior_fn) -> tuple[np.ndarray, bool]:
        """The prior of every stage-two row: the one stored for the release where there is one (trained, with the
        followers, only when some row has none; its other rows are discarded). Returns (prior, all reused)."""
        store, second_ids = label_key.store, ids[~first]
        rel = label_key.names.id_of("rr_prior", params)
        have, stored = priors_of(store.stored_prior(rel), second_ids)
        if have.all() and stored is not None:
            store.warnings.append(
                f"label DP: LP-2ST stage two reuses the prior kept for release {rel[:12]} ({have.size} rows): "
                "the same release draws the same labels, whatever the followers' settings"
            )
            return stored, True
        trained = np.asarray(prior_fn(first, np.where(first, noisy, 0)))[~first]
        store.keep_prior(rel, second_ids[~have], trained[~have])
        _, prior = priors_of(store.stored_prior(rel), second_ids)
        return prior, False


@register
class RegressionMechanism(LabelDPMechanism):
    """laplace, rr_on_bins or unbiased on a real-valued label (privacy/label/regression_release.py), whose
    DP-histogram prior is a release of its own beside the randomizer's."""

    tasks, names, real_valued = ("regression",), ("laplace", "rr_on_bins", "unbiased"), True

    def plan(self, release: ReleaseParams, label_key: LabelKey) -> Plan:
        return release.regression.plan(release.mechanism, release.eps, label_key.names.id_of)

    def draw(self, release: ReleaseParams, request: DrawRequest) -> Drawn:
        r = request
        kept, keep = store_matrices(r.label_key.store)
        return draw_regression(
            release.regression,
            release.mechanism,
            release.eps,
            self.named_plan(release, r.label_key),
            r.labels,
            r.ids,
            r.valid_labels,
            r.valid_ids,
            r.label_key.key,
            r.ledger.record,
            kept=kept,
            keep=keep,
            release_id_of=r.label_key.names.id_of,
        )


_unserved = [pair for pair in ((t, n) for t, ns in LABEL_DP_MECHANISMS.items() for n in ns) if pair not in MECHANISMS]
if _unserved:
    raise ImportError(f"label-DP mechanisms the config allows but no class implements: {_unserved}")
