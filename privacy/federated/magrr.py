"""MagRR: estimating the magnitude of SignDS updates from one randomized-response bit per client.

Each round every client compares r = mean |top-k entries of its update| with the server's
current estimate r_est and sends one bit through binary randomized response (eps_rr-LDP):
  growth phase:      b = 1 iff r < 2 * r_est   ("the estimate has caught up")
  contraction phase: b = 1 iff r < r_est       ("the estimate is too large")
The server debiases the count of ones (N_T = (N_C - N + N P) / (2P - 1), P = e^eps/(1+e^eps)) and
takes the plurality B. Growth: B = 0 multiplies r_est by `growth`; B = 1 counts a reach, and after
`reaches_to_switch` reaches the phase becomes contraction. Contraction: B = 1 halves r_est.
The global learning rate for SignDS is 2 * r_est * num_clients.
Constants follow MindSpore Federated: r_est0 = 1e-5, eps_rr = 5, growth x5, switch after 10 reaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privacy.label.randomized_response import binary_rr, debias_count, rr_cost

R_EST0 = 1e-5
EPS_RR = 5.0
GROWTH = 5.0
REACHES_TO_SWITCH = 10


def magrr_client_bit(r: float, r_est: float, phase: str, eps_rr: float, rng: np.random.Generator) -> int:
    """The client's randomized bit for this round."""
    if phase not in ("growth", "contraction"):
        raise ValueError(f"phase must be 'growth' or 'contraction', got {phase!r}")
    b = int(r < (2.0 * r_est if phase == "growth" else r_est))
    return int(binary_rr(np.array([b]), eps_rr, rng)[0])


@dataclass
class MagRRServer:
    """Server-side state of the magnitude estimate."""

    r_est: float = R_EST0
    eps_rr: float = EPS_RR
    growth: float = GROWTH
    reaches_to_switch: int = REACHES_TO_SWITCH
    phase: str = "growth"
    reaches: int = 0
    history: list = field(default_factory=list)

    def update(self, bits: list[int]) -> int:
        """Fold one round of reported bits into r_est; return the plurality bit B."""
        n = len(bits)
        ones = debias_count(float(sum(bits)), float(n), self.eps_rr)
        plurality = int(ones >= n / 2.0)
        if self.phase == "growth":
            if plurality == 0:
                self.r_est *= self.growth
            else:
                self.reaches += 1
                if self.reaches >= self.reaches_to_switch:
                    self.phase = "contraction"
        elif plurality == 1:
            self.r_est /= 2.0
        self.history.append({"r_est": self.r_est, "phase": self.phase, "debiased_ones": ones, "B": plurality})
        return plurality

    def global_lr(self, num_clients: int) -> float:
        return 2.0 * self.r_est * num_clients

    def cost(self) -> dict:
        return rr_cost(self.eps_rr)
