"""train.staleness: auto, the smallest pipeline that reaches 90% of the compute bound over the measured links.

The leader decides at the greeting, before the welcome, from what it measured: each follower's round trip (the link
probe, vfl/session/link_probe.py; bandwidth where `--check-link` measured it, else unlimited), the time of one training
step without the wire (`step_s`: the leader's bottom timed on a copy, `time_bottom_step`, x STEP_FACTOR) and the run's length. With the
roofline of vfl/netlink/bounds.py (compute C = batch / step_s; a step of staleness K takes
max(batch / C, bytes time, (batch / C + RTT + bytes time) / (K + 1))), and the pipeline's drain at each pause of the
loop (every evaluation, checkpoint and epoch end costs about one round trip more under K > 0), it takes the smallest
K of AUTO_CHOICES whose expected rate is at least AUTO_TARGET x C over the slowest link; where no K reaches it, the
smallest K within AUTO_TARGET of the best any K reaches. K never exceeds the steps between two pauses (a deeper
pipeline would never fill), nor sqrt(T) / 2 for a run of T steps: delayed SGD keeps the synchronous rate
O(1 / sqrt(T)) only while the delay is O(sqrt(T)) (Lian, Huang, Li, Liu, "Asynchronous Parallel Stochastic Gradient
for Nonconvex Optimization", NeurIPS 2015, Theorem 1 and Corollary 2: T >= O(K^2)), and the front door's short runs
lose most AUC beyond it (docs/deploy-wan.md); the factor 1/2 is this project's choice
(synth_small's 76 steps at K = 8 lost about 0.1 of test AUC against the synchronous run). On
loopback (a round trip of well under a tenth of a step) that is K = 0: exactly the synchronous schedule.

The expected cost in test AUC is read from the measurements of docs/deploy-wan.md (MEASURED_AUC_COST: the front
door's data, delayed SGD without a correction), by the run's length; a figure, not a promise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfl.netlink.bounds import Link, bounds

AUTO_CHOICES = (0, 1, 2, 4, 8, 16)
AUTO_TARGET = 0.9  # of the compute bound
# (staleness K, training steps) -> mean test AUC lost against the synchronous schedule on the front door's data, no
# correction, measured with scripts/bench_wan.sh (docs/deploy-wan.md names the machine, the load and the seeds);
# interpolated by steps on a log scale; a K not measured takes the next measured K's cost (a bound)
MEASURED_AUC_COST: dict[tuple[int, int], float] = {
    (2, 300): 0.0047,  # the leader's bottom fresh (the default): --grid accuracy (auto chose 2), 2 seeds
    (2, 802): 0.0010,  # fresh: --grid accuracy (auto chose 2), 2 seeds
    (2, 1600): 0.0006,  # stale (a bound): 1M rows, 3 epochs with early stopping (1,600 of 2,200 steps), 3 seeds
    (4, 300): 0.0080,  # the leader's bottom fresh (the default): --grid accuracy, 2 seeds
    (4, 802): 0.0025,  # fresh: --grid accuracy, 2 seeds
    (4, 1600): 0.0004,  # stale: 1M rows, 3 epochs with early stopping, 3 seeds
}


@dataclass(frozen=True)
class AutoChoice:
    """What `auto` chose and why: K, the compute bound, the synchronous and chosen expected rates (samples/s)."""

    staleness: int
    step_s: float
    compute_sps: float
    sync_sps: float
    expected_sps: float
    rtt_s: float
    steps: int
    segment: int
    auc_cost: float | None
    deepest: int = 16  # the deepest K this run allowed (the steps between pauses, sqrt(steps) / 2)

    def describe(self) -> str:
        """The console's line: what it chose, why, and its expected cost."""
        share = self.expected_sps / self.compute_sps
        why = (
            f"RTT {self.rtt_s * 1000:.2f} ms against a step of {self.step_s * 1000:.1f} ms without the wire: "
            f"synchronous reaches {self.sync_sps / self.compute_sps:.0%} of the compute bound "
            f"({self.compute_sps:,.0f} samples/s)"
        )
        if self.staleness == 0:
            return f"train.staleness auto chose 0 (the synchronous schedule): {why}, at least {AUTO_TARGET:.0%}"
        exact = any(k == self.staleness for k, _ in MEASURED_AUC_COST)
        cost = (
            f"expected test AUC cost {'about' if exact else 'at most about'} {self.auc_cost:.4f} at {self.steps} "
            "steps without a correction (docs/deploy-wan.md)"
            if self.auc_cost is not None
            else "its AUC cost at this run's length is not measured (docs/deploy-wan.md)"
        )
        if share >= AUTO_TARGET:
            how = f"staleness {self.staleness} is the smallest that reaches {share:.0%}"
        else:
            how = (
                f"no staleness up to {self.deepest} (the deepest a run of {self.steps} steps with a pause every "
                f"{self.segment} allows) reaches {AUTO_TARGET:.0%}; {self.staleness} is the smallest within "
                f"{AUTO_TARGET:.0%} of the best of them, {share:.0%}"
            )
        return (
            f"train.staleness auto chose {self.staleness}: {why}; {how} (expected {self.expected_sps:,.0f} "
            f"samples/s); {cost}"
        )

    def as_dict(self) -> dict:
        return {
            "staleness": self.staleness,
            "step_ms": round(self.step_s * 1000, 3),
            "compute_sps": round(self.compute_sps, 1),
            "sync_sps": round(self.sync_sps, 1),
            "expected_sps": round(self.expected_sps, 1),
            "rtt_ms": round(self.rtt_s * 1000, 3),
            "steps": self.steps,
            "segment": self.segment,
            "auc_cost": self.auc_cost,
            "deepest": self.deepest,
        }


def expected_rate(rtt_s: float, step_s: float, batch: int, k: int, segment: int, bandwidth: float, up: float,
                  down: float) -> float:  # fmt: skip
    """Samples/s of staleness k over a link, with the pipeline's drain once per `segment` steps."""
    link = Link(rtt_s, bandwidth, up, down, batch / step_s, batch)
    t = batch / bounds(link, k).expected
    drain = (rtt_s if k else 0.0) / segment  # a pipeline refills after every pause
    return batch / (t + drain)


def choose_staleness(
    rtt_s: float,
    step_s: float,
    batch: int,
    steps: int,
    segment: int,
    bandwidth: float = math.inf,
    up: float = 0.0,
    down: float = 0.0,
) -> AutoChoice:
    """The smallest K (AUTO_CHOICES, at most segment - 1 and sqrt(steps) / 2) reaching AUTO_TARGET of the compute bound batch / step_s
    over a link of `rtt_s` (the slowest follower's), `bandwidth` bytes/s each way and `up` / `down` bytes a sample;
    `steps` the run's training steps, `segment` the most steps between two pauses of the loop."""
    for name, v in (("rtt_s", rtt_s), ("step_s", step_s)):
        if not isinstance(v, (int, float)) or math.isnan(v) or v < 0 or (name == "step_s" and v == 0):
            raise ValueError(f"{name} must be a number {'> 0' if name == 'step_s' else '>= 0'}, got {name}={v!r}")
    segment = max(int(segment), 1)
    compute = batch / step_s
    deepest = min(segment - 1, max(1, int(math.sqrt(max(steps, 1)) / 2)))
    choices = [k for k in AUTO_CHOICES if k == 0 or k <= deepest]
    rates = {k: expected_rate(rtt_s, step_s, batch, k, segment, bandwidth, up, down) for k in choices}
    reach = AUTO_TARGET * compute
    if not any(r >= reach for r in rates.values()):
        reach = AUTO_TARGET * max(rates.values())
    k = next(k for k in choices if rates[k] >= reach)
    cost = measured_cost(k, steps) if k else 0.0
    return AutoChoice(k, step_s, compute, rates[0], rates[k], rtt_s, steps, segment, cost, deepest)


def measured_cost(k: int, steps: int) -> float | None:
    """MEASURED_AUC_COST at (k, steps): the nearest measured K at or above k, interpolated over log(steps) between
    the measured run lengths (held at the ends); None where nothing at or above k was measured."""
    ks = sorted({kk for kk, _ in MEASURED_AUC_COST if kk >= k})
    if not ks:
        return None
    kk = ks[0]
    points = sorted((s, c) for (k2, s), c in MEASURED_AUC_COST.items() if k2 == kk)
    if steps <= points[0][0]:
        return points[0][1]
    if steps >= points[-1][0]:
        return points[-1][1]
    for (s0, c0), (s1, c1) in zip(points, points[1:]):
        if s0 <= steps <= s1:
            f = (math.log(steps) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return c0 + f * (c1 - c0)
    return None


STEP_FACTOR = 1.5  # a step without the wire ~ the leader's bottom (forward, backward, update) x this: the top, the
# loss and the messages' coding; the followers' bottoms run meanwhile


def time_bottom_step(party, train, rows, repeats: int = 2, keepalive=None) -> float:
    """Seconds of one training step of `party`'s bottom (forward, backward, optimizer update) on `rows`, the least of
    `repeats` after one warm-up (`train`: the party's TrainConfig, for its optimizer; keepalive(): called after each,
    so that waiting peers hear from this party), timed on a copy of the model and its optimizer under a forked random state: the
    party's weights, optimizer state and random draws are left exactly as they were."""
    import copy
    import time

    import torch

    from vfl.training.optim import build_optimizer

    model = copy.deepcopy(party.model)
    model.train()
    optimizer = build_optimizer(model, train, bottom=True)
    features = party.train_split.features(rows, party.device)
    best = math.inf
    cuda = [party.device] if torch.device(party.device).type == "cuda" else []  # a dropout's draws on the GPU too
    with torch.random.fork_rng(devices=cuda):
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            out = model(*features).float()
            out.backward(torch.ones_like(out) / out.shape[0])
            optimizer.step()
            optimizer.zero_grad()
            if i:
                best = min(best, time.perf_counter() - t0)
            if keepalive is not None:
                keepalive()
    return best
