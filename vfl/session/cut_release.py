"""A follower's cut releases: every cut it sends passes here, noised under privacy.embedding_dp and charged per row.

Off (no privacy.embedding_dp), `release` is `cut.detach().cpu().numpy()` and `grad_for_cut` returns the gradient
unchanged: today's bytes, bit for bit. On, every cut row is clipped to L2 <= clip and noised by keyed Gaussian noise
(privacy/embedding_noise.py: a PRF of the follower's own secret key, the row's id and the value released), and every
release is charged, before it is sent, to the follower's write-ahead send ledger (privacy/embedding_ledger.py), which
counts across every process that sends for a model:

- training (`plan_training`): the scope `train/<lineage>` (the first run's id, carried by resumed runs), per row
  position of the train, valid and test splits. The leader's WELCOME names the sends per row its schedule makes
  (epochs, evaluations, the re-test after a restore); the noise is calibrated for them before the first send, and a
  schedule the cap (`privacy.embedding_dp.releases`, or the ledger's calibration on a resume) cannot cover is refused
  at the handshake. Each training or evaluation send is charged (the weights moved, so it is a new release).
- scoring (`plan_scoring`): the scope `model/<digest of the bottom's weights>` shared by batch prediction and serving,
  per id and released value: a repeated value is bit-identical to its first release and charged nothing; a new value
  (changed features, another computation's last bits) is a new release under the cap `scoring_releases` (default 1).

What the accountant reports is over the ledger's counts: (eps, delta) of the most-released row (RDP, dp_accounting),
composed with the training lineage's worst row when scoring a trained model.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from privacy.dp_accountant import composed_gaussian_epsilon
from privacy.durable_files import replacing_file, write_json
from privacy.embedding_dp import (
    attack_bounds,
    calibrate_noise_multiplier,
    clip_rows,
    clip_vjp,
    epsilon_of,
    noise_std,
    swamp_warning,
)
from privacy.embedding_ledger import ReleaseCapError as LedgerCapError
from privacy.embedding_ledger import SendLedger, SendLedgerError, marker_path
from privacy.embedding_noise import GRID_BITS, REUSE_STEPS, keyed_noised, ledger_key, noise_key, quantized_rows
from vfl.wire import WireError

SCORING_SPACES = ("predict", "serve")  # keyed by id and released value, in the model's scope
TRAINING_SPACES = ("train", "valid", "test")


class ReleaseCapError(WireError):
    """A row's cut was asked for more often than the noise was calibrated for (an ABORT; the text names counts only)."""


def lineage_scope(ckpt: dict) -> str | None:
    """The training scope a checkpoint's model came from (None: a checkpoint written without embedding DP's lineage)."""
    lineage = (ckpt.get("extra") or {}).get("embedding_dp_lineage")
    return f"train/{lineage}" if lineage else None


def follower_secret(secret_key_file: str) -> bytes:
    """The raw secret of this follower's CurveZMQ key file (the root of its noise and ledger keys)."""
    import zmq.auth

    _, secret = zmq.auth.load_certificate(secret_key_file)
    if not secret:
        raise ValueError(f"embedding DP: {secret_key_file} holds no secret key (give this party's <party>.key_secret)")
    return secret


def default_ledger_dir(secret_key_file: str, party: str) -> str:
    """Beside the follower's secret key: every process of the party holds that key, so every one finds the ledger."""
    return os.path.join(os.path.dirname(os.path.abspath(secret_key_file)), f"{party}.embedding_dp")


def weights_digest(state: dict) -> str:
    """A digest of a bottom's weights (name, dtype, shape and bytes of every tensor): the scoring scope's name."""
    import hashlib

    h = hashlib.sha256(b"vfl/embedding-dp/model/v1")
    for name in sorted(state):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().cpu()
        t = (t.float() if t.is_floating_point() else t).contiguous()  # prediction's and serving's loads agree
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:32]


class CutRelease:
    """This follower's side of privacy.embedding_dp (`dp`: its config, or None for off)."""

    def __init__(
        self,
        dp,
        cut_dim: int,
        log=print,
        party: str = "follower",
        record: str | None = None,
        secret_key_file: str | None = None,
        ledger_dir: str | None = None,
    ):
        self.dp, self.cut_dim, self.log, self.party = dp, cut_dim, log, party
        self.record = record  # debug.record_cuts: every sent cut with its space and row, written by finish()
        self._recorded: list[tuple[str, np.ndarray, np.ndarray]] = []
        self.releases: int | None = None  # the cap on releases per row of this scope (set by a plan)
        self.multiplier: float | None = None
        self.std: float | None = None
        self.sends = 0  # cuts sent (messages)
        self.scope: str | None = None
        self.lineage_scope: str | None = None  # scoring: the training lineage the model came from
        self._ids: dict[str, np.ndarray] = {}
        self._key = self.ledger = None
        if self.on:
            if not secret_key_file:
                raise ValueError(
                    "privacy.embedding_dp needs network.secret_key_file (the follower's own key seeds its noise and "
                    "MACs its send ledger)"
                )
            secret = follower_secret(str(secret_key_file))
            self._key = noise_key(secret)
            directory = str(dp.ledger_dir or ledger_dir or default_ledger_dir(str(secret_key_file), party))
            try:
                self.ledger = SendLedger(directory, ledger_key(secret), marker_path(str(secret_key_file)))
            except SendLedgerError as e:
                raise WireError(str(e)) from None

    @property
    def on(self) -> bool:
        return self.dp is not None

    def bind_rows(self, space: str, ids: np.ndarray) -> None:
        """The ids of `space`'s row positions (the noise of a row is keyed by its id)."""
        self._ids[space] = np.asarray(ids, np.int64)

    # -- calibration ----------------------------------------------------------------------------
    def _adopt(self, scope: str, releases: int, rows: dict[str, str] | None = None) -> int:
        """Calibrate for `releases` per row unless the scope already has a calibration (then keep it); `rows`: the
        digests of the ids each space's row positions name (training counts positions: they must keep their ids)."""
        releases = max(int(releases), 1)
        z = calibrate_noise_multiplier(self.dp.eps, self.dp.delta, releases)
        proposed = {"multiplier": z, "releases": releases, "eps": self.dp.eps, "delta": self.dp.delta,
                    "clip": self.dp.clip, "rows": rows}  # fmt: skip
        plan = self.ledger.plan(scope, proposed)
        if plan.get("rows") != rows:
            raise WireError(
                "embedding DP: this run's rows differ from those this model's sends were counted on (another "
                f"intersection or split; send ledger {self.ledger.dir}); a resume must keep the run's rows"
            )
        if (plan["eps"], plan["delta"], plan["clip"]) != (self.dp.eps, self.dp.delta, self.dp.clip):
            raise WireError(
                f"embedding DP: this model's sends were calibrated for eps={plan['eps']:g}, delta={plan['delta']:g}, "
                f"clip={plan['clip']:g} (send ledger {self.ledger.dir}); privacy.embedding_dp says eps={self.dp.eps:g}, "
                f"delta={self.dp.delta:g}, clip={self.dp.clip:g}: keep them for the model's life"
            )
        self.scope, self.releases, self.multiplier = scope, int(plan["releases"]), float(plan["multiplier"])
        self.std = noise_std(self.multiplier, self.dp.clip)
        return int(plan["releases"])

    def plan_training(self, sends: dict[str, int], lineage: str) -> None:
        """Calibrate for the leader's schedule: `sends` per row of each split from here to the end of the run."""
        if not self.on:
            return
        need = max(sends.values())
        if self.dp.releases is not None and need > self.dp.releases:
            raise ReleaseCapError(
                f"embedding DP: the leader's schedule sends a row's cut up to {need} times ({_sends_text(sends)}), "
                f"over privacy.embedding_dp.releases={self.dp.releases}; raise it, or evaluate less often"
            )
        rows = {space: _ids_digest(self._ids[space]) for space in TRAINING_SPACES if space in self._ids}
        cap = self._adopt(f"train/{lineage}", self.dp.releases or need, rows)
        counts = {s: self.ledger.most_in(self.scope, s) for s in sends}
        worst = max(counts[s] + sends[s] for s in sends)
        if worst > cap:
            raise ReleaseCapError(
                f"embedding DP: resuming would send a row's cut up to {worst} times for this model (sent so far: "
                f"{_sends_text(counts)}; to come: {_sends_text(sends)}), over the {cap} its noise was calibrated for "
                f"(send ledger {self.ledger.dir}); give privacy.embedding_dp.releases headroom on a run's first start"
            )
        self.log(
            f"embedding DP: follower {self.party} calibrates for {cap} sends per row ({_sends_text(sends)} to come): "
            f"clips each cut row to L2 <= {self.dp.clip:g} and adds keyed Gaussian noise std {self.std:.4g} (noise "
            f"multiplier {self.multiplier:.4g} x sensitivity {2 * self.dp.clip:g}); (eps={self._eps(cap):.4g}, "
            f"delta={self.dp.delta:g}) per row (RDP accountant, dp_accounting); every send charged to {self.ledger.dir}"
        )
        self._warn_swamp()

    def plan_scoring(self, model_digest: str, lineage_scope: str | None = None) -> None:
        """Calibrate the scoring of one trained model (prediction and serving share its scope and cap)."""
        if not self.on:
            return
        cap = self._adopt(f"model/{model_digest}", self.dp.scoring_releases)
        self.lineage_scope = lineage_scope
        self.log(
            f"embedding DP: follower {self.party} scores model {model_digest[:12]} with at most {cap} release(s) of "
            f"any id's cut across every prediction and serving process (a repeat of a released value is the same "
            f"bytes, charged nothing): keyed Gaussian noise std {self.std:.4g}, (eps={self._eps(cap):.4g}, "
            f"delta={self.dp.delta:g}) per id for this model's scoring; charged to {self.ledger.dir}"
        )
        self._warn_swamp()

    def _warn_swamp(self) -> None:
        warning = swamp_warning(self.std, self.dp.clip, self.cut_dim)
        if warning:
            self.log(f"warning: {warning}")

    def _eps(self, count: int) -> float:
        return epsilon_of(self.multiplier, count, self.dp.delta) if count else 0.0

    # -- sending --------------------------------------------------------------------------------
    def release(self, cut: torch.Tensor, space: str, n: int | None = None, rows=None, ids=None) -> np.ndarray:
        """The float32 cut to send for `rows` (positions of a space of `n` rows) or `ids` (serving): as computed
        when off; clipped, keyed-noised and charged (ReleaseCapError, before anything leaves, past the cap) when on."""
        if not self.on:
            sent = cut.detach().cpu().numpy()
            self._keep(space, n, rows, ids, sent)
            return sent
        if self.scope is None:
            raise RuntimeError("embedding DP: plan_training or plan_scoring must run before the first cut is released")
        positions = None
        if ids is None:
            positions = np.arange(n, dtype=np.int64)[rows]
            ids = self._ids[space][positions] if space in self._ids else positions
        ids = np.asarray(ids, np.int64).ravel()
        values = quantized_rows(clip_rows(cut.detach().float().cpu(), self.dp.clip).numpy(), self.dp.clip)
        if space in SCORING_SPACES:
            values = self._reuse(ids, values)
        sent, digests = keyed_noised(self._key, ids, values, self.std)
        try:
            if space in SCORING_SPACES:
                self.ledger.charge(self.scope, "id", ids, self.releases, digests, values)
            else:
                self.ledger.charge(self.scope, space, positions, self.releases)
        except LedgerCapError as e:
            raise ReleaseCapError(str(e)) from None
        except SendLedgerError as e:
            raise WireError(str(e)) from None
        self.sends += 1
        self._keep(space, n, rows, ids if positions is None else None, sent)  # training: row positions, as off
        return sent

    def _reuse(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Scoring: each row's value replaced by the id's earlier release within REUSE_STEPS grid steps (if any), so a
        repeat computed by another engine or batch is the first release's bytes again."""
        self.ledger.refresh()
        tolerance = REUSE_STEPS * self.dp.clip * 2.0**-GRID_BITS
        values = values.copy()
        for i, key in enumerate(ids.tolist()):
            for earlier in self.ledger.released_values(self.scope, "id", key):
                if earlier.shape == values[i].shape and float(np.max(np.abs(earlier - values[i]))) <= tolerance:
                    values[i] = earlier
                    break
        return values

    def _keep(self, space: str, n, rows, ids, sent: np.ndarray) -> None:
        if self.record is None:
            return
        where = np.asarray(ids, np.int64) if ids is not None else np.arange(n, dtype=np.int64)[rows]
        self._recorded.append((space, where.copy(), sent.copy()))

    def grad_for_cut(self, cut: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """d loss / d cut from the leader's d loss / d (released cut): the clipping's Jacobian when on."""
        return clip_vjp(cut, grad, self.dp.clip) if self.on else grad

    # -- reports --------------------------------------------------------------------------------
    def report(self) -> dict | None:
        """(eps, delta, sigma, releases) over the send ledger's counts for this follower's own metrics; None when
        off. Scoring adds the composition with the training lineage's most-sent row (`eps_with_training`)."""
        if not self.on or self.scope is None:
            return None
        most = self.ledger.most(self.scope)
        rep = {
            "eps": self._eps(self.releases),
            "eps_target": self.dp.eps,
            "delta": self.dp.delta,
            "clip": self.dp.clip,
            "noise_multiplier": self.multiplier,
            "noise_std": self.std,
            "releases_per_row": self.releases,
            "scope": self.scope,
            "most_sends_of_a_row": most,
            "eps_spent_by_most_sent_row": self._eps(most),
            "releases_charged": self.ledger.releases(self.scope),
            # the most any attack on one row can gain at the cap (privacy/embedding_dp.py: attack_bounds)
            "attack_auc_bound": attack_bounds(self.multiplier, self.releases)["auc"],
            "attack_balanced_accuracy_bound": attack_bounds(self.multiplier, self.releases)["balanced_accuracy"],
            "cuts_sent": self.sends,
            "ledger": self.ledger.dir,
            "noise": "keyed: a PRF of the follower's key, the row's id and the released value (a repeat is free)",
            "accountant": "dp_accounting RdpAccountant (Gaussian, replace-one sensitivity 2*clip)",
        }
        plan = self.ledger.plan_of(self.lineage_scope) if self.lineage_scope else None
        if plan is not None:
            trained = self.ledger.most(self.lineage_scope)
            rep["training_scope"] = self.lineage_scope
            rep["eps_with_training"] = composed_gaussian_epsilon(
                [(plan["multiplier"], trained, 1.0), (self.multiplier, most, 1.0)], self.dp.delta, "rdp"
            )
        return rep

    def summary(self) -> str | None:
        """One console line of what this process's sends spent (None when off)."""
        rep = self.report()
        if rep is None:
            return None
        text = (
            f"embedding DP: follower {self.party} sent {rep['cuts_sent']} noised cuts; the most-released row of "
            f"{rep['scope']} has {rep['most_sends_of_a_row']} release(s) in the ledger: "
            f"(eps={rep['eps_spent_by_most_sent_row']:.4g}, delta={rep['delta']:g}) of (eps={rep['eps']:.4g})"
        )
        if "eps_with_training" in rep:
            text += f"; with its training sends (eps={rep['eps_with_training']:.4g})"
        return text

    def save_record(self) -> None:
        """debug.record_cuts: the .npz of every sent cut (space, row position or id, cut), in sending order."""
        if self.record is None or not self._recorded:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.record)) or ".", exist_ok=True)
        with replacing_file(self.record) as f:  # a file object: np.savez adds no .npz to it
            np.savez(
                f,
                space=np.concatenate([np.full(len(r), s) for s, r, _ in self._recorded]),
                row=np.concatenate([r for _, r, _ in self._recorded]),
                send=np.concatenate([np.full(len(r), i, np.int64) for i, (_, r, _) in enumerate(self._recorded)]),
                cut=np.concatenate([c for _, _, c in self._recorded]).astype(np.float32),
            )

    def write_report(self, out_dir: str, name: str | None = None) -> str | None:
        """OUT/<party>_embedding_dp.json (or `name`): this follower's own record of what its cuts spent (never sent)."""
        self.save_record()
        rep = self.report()
        if rep is None:
            return None
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, name or f"{self.party}_embedding_dp.json")
        write_json(path, rep, indent=2)
        return path


def _ids_digest(ids: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(ids, "<i8").tobytes()).hexdigest()


def _sends_text(sends: dict[str, int]) -> str:
    return ", ".join(f"{space} {count}" for space, count in sends.items())
