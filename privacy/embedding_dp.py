"""Embedding DP on a follower: per-row clipping, Gaussian noise and its RDP calibration over repeated releases.

A follower's cut embedding of a row is a function of that row's features. Before it leaves the follower, each row's
cut c is clipped to L2 norm C (`clip_rows`: c * min(1, C / ||c||)) and Gaussian noise N(0, s^2 I) is added
(`noised_cut`), with s = z * Delta, Delta = 2 C and z the noise multiplier chosen by `calibrate_noise_multiplier`.

Neighbouring relation: two tables that differ in one row's features (replace-one; the ids, and so which rows exist,
are public to both parties after PSI). The clipped cut of that row moves by at most ||c - c'|| <= 2 C, the other
rows' cuts of the same release not at all, so one release is the Gaussian mechanism with L2 sensitivity 2 C:
(alpha, alpha / (2 z^2))-RDP (Mironov 2017, "Renyi Differential Privacy", Prop. 7). A row sent R times (epochs,
evaluations, prediction requests) is R adaptive releases: RDP composes by adding (Mironov 2017, Prop. 1), done by
Google's dp_accounting `RdpAccountant` over `SelfComposedDpEvent(GaussianDpEvent(z), R)` (privacy/dp_accountant.py,
shared with the horizontal mechanisms), whose conversion to (eps, delta) is Canonne, Kamath & Steinke 2020 ("The
Discrete Gaussian for DP"), Prop. 12 (dp_accounting's `rdp.compute_epsilon`). The noise multiplier is the smallest z
whose R-fold composition is within eps (dp_accounting's calibration search).

What the accounting treats as fixed: the bottom's weights at each send. They are trained on the follower's own rows
(through gradients the leader returns), so a row also reaches other rows' later cuts through the weights; that path
is not bounded here (it would need DP-SGD on the bottom), as in MindSpore Federated's EDP and SecretFlow's embedding
DP. Pure functions; the random generator is passed in (`os_entropy_generator` gives one no other party can seed).
"""

from __future__ import annotations

import math
import secrets

import torch

from privacy.dp_accountant import gaussian_epsilon, gaussian_noise_multiplier

SENSITIVITY_PER_CLIP = 2.0  # replace-one: ||clip(c) - clip(c')|| <= 2 C


def os_entropy_generator(device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator seeded from the OS's entropy (secrets, 63 bits): no seed any other party knows."""
    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(63))
    return gen


def clip_rows(cut: torch.Tensor, clip: float) -> torch.Tensor:
    """Each row scaled to L2 norm at most `clip` (rows already inside are unchanged, bit for bit); differentiable."""
    norms = torch.linalg.vector_norm(cut, dim=1, keepdim=True)
    scale = torch.clamp(clip / torch.clamp(norms, min=1e-12), max=1.0)
    return torch.where(norms > clip, cut * scale, cut)


def noised_cut(cut: torch.Tensor, clip: float, noise_std: float, generator: torch.Generator) -> torch.Tensor:
    """The released cut: rows clipped to L2 <= clip, plus N(0, noise_std^2) in every coordinate (no graph)."""
    with torch.no_grad():
        clipped = clip_rows(cut.detach().float(), clip)
        noise = torch.randn(clipped.shape, generator=generator, device=clipped.device, dtype=clipped.dtype)
        return clipped + noise_std * noise


def clip_vjp(cut: torch.Tensor, grad: torch.Tensor, clip: float) -> torch.Tensor:
    """d loss / d cut from d loss / d (released cut): the noise is additive (its Jacobian is I), the clipping's
    Jacobian is applied by autograd, so the bottom learns through the clipping as the released values were made."""
    x = cut.detach().float().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(clip_rows(x, clip), x, grad.to(x.device, torch.float32))
    return g


def epsilon_of(noise_multiplier: float, releases: int, delta: float) -> float:
    """eps at `delta` of `releases` Gaussian releases of noise multiplier z (std / sensitivity), by dp_accounting's
    RDP accountant (privacy/dp_accountant.py: Mironov 2017 Prop. 7 and Prop. 1; conversion Canonne-Kamath-Steinke
    2020 Prop. 12)."""
    if not noise_multiplier > 0:
        raise ValueError(f"noise multiplier must be > 0, got {noise_multiplier}")
    if releases < 1:
        raise ValueError(f"releases must be >= 1, got {releases}")
    return gaussian_epsilon(noise_multiplier, delta, compositions=releases, accountant="rdp")


def calibrate_noise_multiplier(eps: float, delta: float, releases: int) -> float:
    """The smallest noise multiplier z whose `releases`-fold Gaussian composition is (eps, delta)-DP by the RDP
    accountant (privacy/dp_accountant.py's calibration: dp_accounting's Brent search, never below the budget)."""
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number > 0, got eps={eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got delta={delta}")
    if releases < 1:
        raise ValueError(f"releases must be >= 1, got releases={releases}")
    return gaussian_noise_multiplier(eps, delta, compositions=releases, accountant="rdp")


def attack_bounds(noise_multiplier: float, releases: int) -> dict[str, float]:
    """The most any attack can gain on one row from `releases` sends at noise multiplier z: the AUC and the balanced
    accuracy of the best test telling two values of the row apart (its clipped cut moved by the full 2 * clip).

    R Gaussian releases of shift Delta and std z * Delta are one Gaussian of shift mu = sqrt(R) / z standard
    deviations (Dong, Roth & Su 2019, "Gaussian Differential Privacy", Cor. 3.3: mu-GDP composes as sqrt(sum mu^2));
    the optimal test's ROC is TPR = Phi(Phi^-1(FPR) + mu) (their Def. 2.5, the Neyman-Pearson test), whose area is
    Phi(mu / sqrt 2) and whose best balanced accuracy is Phi(mu / 2). Any decoder of a feature from the cuts is such a
    test (or weaker), whatever it knows of the other rows."""
    if not noise_multiplier > 0:
        raise ValueError(f"noise multiplier must be > 0, got {noise_multiplier}")
    if releases < 1:
        raise ValueError(f"releases must be >= 1, got {releases}")
    mu = math.sqrt(releases) / noise_multiplier
    phi = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731 - the standard normal CDF
    return {"mu": mu, "auc": phi(mu / math.sqrt(2.0)), "balanced_accuracy": phi(mu / 2.0)}


def noise_std(noise_multiplier: float, clip: float) -> float:
    """The per-coordinate noise std: z times the replace-one sensitivity 2 C."""
    return noise_multiplier * SENSITIVITY_PER_CLIP * clip


def swamp_warning(std: float, clip: float, cut_dim: int, ratio: float = 3.0) -> str | None:
    """A one-line warning, with the numbers, when the noise's expected L2 norm (std * sqrt(cut_dim)) exceeds `ratio`
    times the largest signal norm `clip`; None otherwise."""
    noise_norm = std * math.sqrt(cut_dim)
    if noise_norm <= ratio * clip:
        return None
    return (
        f"embedding DP: the noise swamps the signal: a row's noise has L2 norm ~{noise_norm:.3g} "
        f"(std {std:.3g} x sqrt(cut_dim {cut_dim})) against a clipped cut of norm <= {clip:g} "
        f"({noise_norm / clip:.1f}x); expect little utility (raise eps, or lower the releases per row)"
    )
