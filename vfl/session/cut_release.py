"""A follower's cut releases: every cut it sends passes here, noised under privacy.embedding_dp and counted per row.

Off (no privacy.embedding_dp), `release` is `cut.detach().cpu().numpy()` and `grad_for_cut` returns the gradient
unchanged: today's bytes, bit for bit. On, `plan(releases)` calibrates the noise multiplier for (eps, delta) over
`releases` sends of any one row (privacy/embedding_dp.py) before the first cut leaves, logs it (and a warning when the
noise swamps the signal); `release` clips each row to L2 <= clip and adds fresh Gaussian noise from this follower's
own OS entropy, and refuses, before anything is sent, a row's send beyond the planned count: a leader asking again
(another epoch, evaluation or prediction range than planned) learns no more than the accounted budget. Counts are
per row position of a named space (train, valid, test, predict) or per id (serve), for this process's life.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from privacy.embedding_dp import (
    calibrate_noise_multiplier,
    clip_vjp,
    epsilon_of,
    noise_std,
    noised_cut,
    os_entropy_generator,
    swamp_warning,
)
from vfl.durable_files import replacing_file, write_json
from vfl.wire import WireError


class ReleaseCapError(WireError):
    """A row's cut was asked for more often than the noise was calibrated for (an ABORT; the text names counts only)."""


class CutRelease:
    """This follower's side of privacy.embedding_dp (`dp`: its config, or None for off)."""

    def __init__(self, dp, cut_dim: int, log=print, party: str = "follower", record: str | None = None):
        self.dp, self.cut_dim, self.log, self.party = dp, cut_dim, log, party
        self.record = record  # debug.record_cuts: every sent cut with its space and row, written by finish()
        self._recorded: list[tuple[str, np.ndarray, np.ndarray]] = []
        self.releases: int | None = None  # the planned sends per row (set by plan)
        self.multiplier: float | None = None
        self.std: float | None = None
        self.sends = 0  # cuts sent (messages)
        self._counts: dict[str, np.ndarray] = {}
        self._id_counts: dict[int, int] = {}
        self._gen: torch.Generator | None = None

    @property
    def on(self) -> bool:
        return self.dp is not None

    def plan(self, releases: int) -> None:
        """Calibrate sigma for `releases` sends of any one row (the config's `releases` wins when set)."""
        if not self.on:
            return
        self.releases = int(self.dp.releases or releases)
        self.multiplier = calibrate_noise_multiplier(self.dp.eps, self.dp.delta, self.releases)
        self.std = noise_std(self.multiplier, self.dp.clip)
        spent = epsilon_of(self.multiplier, self.releases, self.dp.delta)
        self.log(
            f"embedding DP: follower {self.party} clips each cut row to L2 <= {self.dp.clip:g} and adds Gaussian noise "
            f"std {self.std:.4g} (noise multiplier {self.multiplier:.4g} x sensitivity {2 * self.dp.clip:g}); "
            f"(eps={spent:.4g}, delta={self.dp.delta:g}) over at most {self.releases} sends of any row "
            f"(RDP accountant, dp_accounting)"
        )
        warning = swamp_warning(self.std, self.dp.clip, self.cut_dim)
        if warning:
            self.log(f"warning: {warning}")

    def _charge(self, space: str, n: int, rows) -> None:
        counts = self._counts.get(space)
        if counts is None or counts.size != n:
            counts = self._counts[space] = np.zeros(n, np.int32)
        after = counts[rows] + 1
        if after.size and int(after.max()) > self.releases:
            raise ReleaseCapError(
                f"embedding DP: the leader asked for send {int(after.max())} of a {space} row's cut, but follower "
                f"{self.party} calibrated its noise for {self.releases} sends per row "
                f"(set privacy.embedding_dp.releases to cover every epoch and evaluation); no cut sent"
            )
        counts[rows] = after

    def refusal(self, ids: np.ndarray) -> str | None:
        """Why a send of these ids' cuts would pass the planned sends per row (None: it would not, or off)."""
        if not self.on:
            return None
        worst = max((self._id_counts.get(int(i), 0) + 1 for i in np.asarray(ids).ravel()), default=0)
        if worst <= self.releases:
            return None
        return (
            f"embedding DP: an id asked for send {worst}, over the {self.releases} sends per row this follower's "
            f"noise is calibrated for (privacy.embedding_dp.releases); no cut sent"
        )

    def _charge_ids(self, ids: np.ndarray) -> None:
        why = self.refusal(ids)
        if why:
            raise ReleaseCapError(why)
        ids = [int(i) for i in np.asarray(ids).ravel()]
        for i in ids:
            self._id_counts[i] = self._id_counts.get(i, 0) + 1

    def release(self, cut: torch.Tensor, space: str, n: int | None = None, rows=None, ids=None) -> np.ndarray:
        """The float32 cut to send for `rows` (positions of a space of `n` rows) or `ids` (serving): as computed
        when off; clipped and noised when on (ReleaseCapError, before anything is drawn, past the planned sends)."""
        if not self.on:
            sent = cut.detach().cpu().numpy()
            self._keep(space, n, rows, ids, sent)
            return sent
        if self.releases is None:
            raise RuntimeError("embedding DP: plan(releases) must run before the first cut is released")
        if ids is not None:
            self._charge_ids(ids)
        else:
            self._charge(space, n, rows)
        if self._gen is None or self._gen.device != cut.device:
            self._gen = os_entropy_generator(cut.device)
        self.sends += 1
        sent = noised_cut(cut, self.dp.clip, self.std, self._gen).cpu().numpy()
        self._keep(space, n, rows, ids, sent)
        return sent

    def _keep(self, space: str, n, rows, ids, sent: np.ndarray) -> None:
        if self.record is None:
            return
        where = np.asarray(ids, np.int64) if ids is not None else np.arange(n, dtype=np.int64)[rows]
        self._recorded.append((space, where.copy(), sent.copy()))

    def grad_for_cut(self, cut: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """d loss / d cut from the leader's d loss / d (released cut): the clipping's Jacobian when on."""
        return clip_vjp(cut, grad, self.dp.clip) if self.on else grad

    def report(self) -> dict | None:
        """(eps, delta, sigma, releases) for this follower's own metrics; None when off."""
        if not self.on or self.releases is None:
            return None
        most = max([int(c.max()) for c in self._counts.values() if c.size] + list(self._id_counts.values()) or [0])
        return {
            "eps": epsilon_of(self.multiplier, self.releases, self.dp.delta),
            "eps_target": self.dp.eps,
            "delta": self.dp.delta,
            "clip": self.dp.clip,
            "noise_multiplier": self.multiplier,
            "noise_std": self.std,
            "releases_per_row": self.releases,
            "most_sends_of_a_row": most,
            "eps_spent_by_most_sent_row": epsilon_of(self.multiplier, most, self.dp.delta) if most else 0.0,
            "cuts_sent": self.sends,
            "accountant": "dp_accounting RdpAccountant (Gaussian, replace-one sensitivity 2*clip)",
        }

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

    def write_report(self, out_dir: str) -> str | None:
        """OUT/<party>_embedding_dp.json: this follower's own record of what its cuts spent (never sent)."""
        self.save_record()
        rep = self.report()
        if rep is None:
            return None
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{self.party}_embedding_dp.json")
        write_json(path, rep, indent=2)
        return path
