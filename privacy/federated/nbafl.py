"""NbAFL: noising before model aggregation.

After Wei et al. 2020 ("Federated Learning With Differential Privacy: Algorithms and Performance Analysis", IEEE TIFS;
Theorems 1 and 2), with the noise scales of FederatedScope's wrap_nbafl_trainer / wrap_nbafl_server:

  clients clip their weights to norm w_clip and add N(0, scale_u^2) before uploading, with
      scale_u = w_clip * T * 2 * constant / (n_train * eps)       (T rounds, n_train local samples)
  the server adds N(0, scale_d^2) to the aggregate only when T > sqrt(N) * L:
      scale_d = 2 * constant * w_clip * sqrt(T^2 - L^2 N) / (min_n_train * N * eps)
  (N clients, L clients sampled per round; constant = c = sqrt(2 ln(1.25/delta)) in the paper,
  a tunable constant in FederatedScope). Local training clips gradient norms to grad_clip.
The (eps, delta) calibrated here is the guarantee the paper's Theorem 1 claims for the whole T-round run (it composes
over T exposures inside scale_u); the claim rests on the classical Gaussian mechanism, which holds only for a per-round
eps below 1, so where epsilon / T >= 1 (or a constant below the paper's) `nbafl_cost` charges the accountant's figure
instead of the void claim. A client's upload changes by at most Delta_U = 2 w_clip / n_train when one of its
samples is replaced (the paper's Lemma 1), so each round's uplink is a Gaussian release of noise multiplier
scale_u / Delta_U = T c / eps; `uplink_noise_multiplier` gives it to the ledger's accountant, which composes the T
releases instead of trusting the claim (the downlink is post-processing of the uploads plus more noise, so the
uplink figure bounds it too).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from privacy.domains import Params
from privacy.field_types import Number


class NbAFLParams(Params):
    epsilon: Number(0, lo_open=True) = 10.0
    delta: Number(0, 1, lo_open=True, hi_open=True) = 0.01
    w_clip: Number(0, lo_open=True) = 1.0
    grad_clip: Number(0, lo_open=True) = 5.0
    constant: Optional[Number(0, lo_open=True)] = None  # None: sqrt(2 ln(1.25 / delta))

    @property
    def c(self) -> float:
        return self.constant if self.constant is not None else math.sqrt(2.0 * math.log(1.25 / self.delta))


def uplink_scale(p: NbAFLParams, rounds: int, n_train: int) -> float:
    """scale_u = w_clip * T * 2 * c / (n_train * eps)."""
    return p.w_clip * rounds * 2.0 * p.c / (n_train * p.epsilon)


def uplink_noise_multiplier(p: NbAFLParams, rounds: int) -> float:
    """scale_u / Delta_U = T c / eps: the same for every client, whatever its n_train."""
    return rounds * p.c / p.epsilon


def downlink_scale(p: NbAFLParams, rounds: int, num_clients: int, sampled: int, min_n_train: int) -> float:
    """scale_d, or 0 when T <= sqrt(N) * L (no downlink noise needed)."""
    if rounds <= math.sqrt(num_clients) * sampled:
        return 0.0
    return (
        2.0 * p.c * p.w_clip * math.sqrt(rounds**2 - sampled**2 * num_clients) / (min_n_train * num_clients * p.epsilon)
    )


def clip_weights(weights: np.ndarray, w_clip: float) -> np.ndarray:
    """w / max(1, ||w|| / w_clip)."""
    norm = float(np.linalg.norm(weights))
    return weights / max(1.0, norm / w_clip)


def nbafl_client(
    weights: np.ndarray, p: NbAFLParams, rounds: int, n_train: int, rng: np.random.Generator
) -> np.ndarray:
    """Clip the local weights and add the uplink noise."""
    clipped = clip_weights(np.asarray(weights, dtype=np.float64), p.w_clip)
    return clipped + rng.normal(0.0, uplink_scale(p, rounds, n_train), size=clipped.shape)


def nbafl_server(
    aggregate: np.ndarray,
    p: NbAFLParams,
    rounds: int,
    num_clients: int,
    sampled: int,
    min_n_train: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Add the downlink noise to the aggregate when the theorem requires it."""
    s = downlink_scale(p, rounds, num_clients, sampled, min_n_train)
    return aggregate + rng.normal(0.0, s, size=aggregate.shape) if s > 0 else aggregate.copy()


def claim_holds(p: NbAFLParams, rounds: int) -> bool:
    """Whether Theorem 1's run-level (epsilon, delta) is a guarantee: its calibration is the classical Gaussian
    mechanism's (Dwork & Roth 2014, Theorem A.1: c >= sqrt(2 ln(1.25 / delta)) at a per-round eps below 1), so it holds
    only when epsilon / T < 1 and the constant is at least the paper's."""
    return p.epsilon / rounds < 1 and p.c >= math.sqrt(2.0 * math.log(1.25 / p.delta)) * (1 - 1e-12)


def nbafl_cost(p: NbAFLParams, rounds: int, accountant: str = "rdp") -> dict:
    """The run-level (eps, delta) a client pays: the paper's claim where it holds (claim_holds), else the accountant's
    composition of the T uplink releases at delta (`claim_void`: the configured epsilon is not a guarantee)."""
    if claim_holds(p, rounds):
        return {"eps": float(p.epsilon), "delta": float(p.delta)}
    from privacy.dp_accountant import gaussian_epsilon

    eps = gaussian_epsilon(uplink_noise_multiplier(p, rounds), float(p.delta), rounds, accountant=accountant)
    return {"eps": float(eps), "delta": float(p.delta), "claim_void": True}
