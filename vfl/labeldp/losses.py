"""Losses that train on labels randomized by label DP: forward correction and ALIBI-style posterior soft labels.

Forward correction (Patrini et al. 2017) and posterior soft labels (Malek et al. 2021), binary and over K classes. They read only the noisy labels and the
mechanism's public channel (flip probability or k-ary transition), so training on them is post-processing."""

from __future__ import annotations


def forward_corrected_bce(logits, noisy_labels, rho: float):
    """BCE of q = rho + (1 - 2 rho) sigmoid(logit) against the noisy label (forward loss correction,
    Patrini et al. 2017, Eq. 6 with the binary flip matrix). sigmoid(logit) then estimates the
    clean click probability, so calibration and logloss on true labels hold up."""
    import torch

    p = torch.sigmoid(logits)
    q = (rho + (1.0 - 2.0 * rho) * p).clamp(1e-7, 1.0 - 1e-7)
    y = noisy_labels.to(q.dtype)
    return -(y * torch.log(q) + (1.0 - y) * torch.log1p(-q)).mean()


def posterior_soft_bce(logits, noisy_labels, rho: float):
    """BCE against the posterior P(y=1 | y~, x) of the true label, with the model's own (detached)
    prediction p as the prior: t = p(1-rho) / (p(1-rho) + (1-p) rho) if y~ = 1, else
    p rho / (p rho + (1-p)(1-rho)). This is the Bayesian denoising of ALIBI (Malek et al. 2021,
    "Antipodes of Label Differential Privacy: PATE and ALIBI", Sec. 3.2) for binary randomized
    response instead of Laplace noise; it reads only the noisy labels, so it is post-processing."""
    import torch
    import torch.nn.functional as F

    p = torch.sigmoid(logits).detach()
    y = noisy_labels.to(p.dtype)
    up, down = p * (1.0 - rho), (1.0 - p) * rho
    t1 = up / (up + down)
    t0 = p * rho / (p * rho + (1.0 - p) * (1.0 - rho))
    target = (y * t1 + (1.0 - y) * t0).clamp(0.0, 1.0)
    return F.binary_cross_entropy_with_logits(logits, target)


def forward_corrected_ce(logits, noisy_classes, transition):
    """Cross-entropy of the noisy class under q = softmax(logits) T (forward loss correction, Patrini et
    al. 2017, Theorem 2, with T the K x K channel of k-ary RR, T[i, j] = P(y~ = j | y = i)). The minimiser
    of the corrected loss is that of the clean loss, so softmax(logits) estimates P(y | x)."""
    import torch

    q = (torch.softmax(logits, dim=1) @ transition.to(logits.dtype)).clamp_min(1e-7)
    return torch.nn.functional.nll_loss(torch.log(q), noisy_classes.long())


def posterior_soft_ce(logits, noisy_classes, transition):
    """Cross-entropy against the posterior P(y = j | y~, x) proportional to p_j T[j, y~], with the model's own
    (detached) prediction p as the prior: the K-class form of the ALIBI-style soft labels above."""
    import torch

    p = torch.softmax(logits, dim=1).detach()
    t = transition.to(p.dtype)[:, noisy_classes.long()].T  # (B, K): T[j, y~_b]
    target = p * t
    target = target / target.sum(dim=1, keepdim=True)
    return -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()


def corrected_loss(correction: str, rho: float | None = None, transition=None):
    """The loss that trains on randomized labels: `forward` (Patrini et al. 2017) or `posterior` (ALIBI-style soft
    labels), binary with the flip probability rho, or over K classes with the K x K transition (a numpy array)."""
    if correction not in ("forward", "posterior"):
        raise ValueError(f"correction must be 'forward' or 'posterior', got {correction!r}")
    if (rho is None) == (transition is None):
        raise ValueError("pass rho (binary labels) or transition (K classes), exactly one")
    if transition is not None:
        import torch

        t = torch.from_numpy(transition)
        loss = posterior_soft_ce if correction == "posterior" else forward_corrected_ce
        return lambda logits, labels: loss(logits, labels, t.to(logits.device))
    loss = posterior_soft_bce if correction == "posterior" else forward_corrected_bce
    return lambda logits, labels: loss(logits, labels, rho)
