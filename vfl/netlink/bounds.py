"""A link's three bounds on training throughput (compute, bandwidth, latency) and the schedule and codecs it calls for.

A training step of `batch` samples moves `up` bytes a sample from followers to the leader (cuts) and `down` bytes a
sample back (gradients), over a link of `rtt_s` round trip and `bandwidth` bytes/s each way (full duplex); the parties
alone, on loopback, train `compute` samples/s. With staleness K a follower keeps up to K + 1 batches in flight (it
sends K more before the first one's gradient returns), so (a roofline: Williams et al. 2009, applied to a pipeline):

    compute bound    C = compute
    bandwidth bound  B = bandwidth / max(up, down)            (each direction carries its bytes at most this fast)
    latency bound    L = batch x (K + 1) / RTT                (steps x RTT / in-flight batches of the epoch's time)

and a step costs the compute, plus, unless it is hidden by K batches in flight, a round trip and the bytes' time:

    synchronous (K = 0)  t = batch / C + RTT + batch x (up + down) / bandwidth
    K > 0                t = max(batch / C, batch x max(up, down) / bandwidth, (batch / C + RTT + ...) / (K + 1))

The expected samples/s is batch / t. A codec divides a direction's bytes by its ratio over a row of d float32 (the
layouts of vfl/wire/codecs.py: fp16, bf16: 2; int8, a byte an entry and a 4-byte scale: 4d / (d + 4); top-k of
k = ceil(f d) entries, each a float32 value and a uint16 index: 4d / 6k, f = 0.25 by default).
`advise` picks the lightest codecs whose bandwidth bound clears the compute bound, then the smallest K whose expected
rate is within 10% of the best any K reaches. Figures, not promises: it assumes the parties' compute overlaps the wire once K > 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STALENESS_CHOICES = (0, 1, 2, 4, 8)
EMBEDDING_CODECS = ("none", "fp16", "int8")  # lightest first (the lossier the later)
GRADIENT_CODECS = ("none", "fp16", "int8", "topk")
TOPK_FRACTION = 0.25  # network.compression.topk_fraction's default: the share of a gradient row's entries kept


@dataclass(frozen=True)
class Link:
    """A measured link and a run's traffic: RTT (s), bandwidth (bytes/s each way; inf: unlimited), bytes a training
    sample each way, the compute-only rate (samples/s, loopback) and the batch size."""

    rtt_s: float
    bandwidth: float
    up: float
    down: float
    compute: float
    batch: int

    def __post_init__(self):
        for name in ("rtt_s", "bandwidth", "up", "down", "compute"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) or v < 0:
                raise ValueError(f"{name} must be a number >= 0, got {name}={v!r}")
        if self.compute <= 0 or self.bandwidth <= 0:
            raise ValueError(
                f"compute and bandwidth must be > 0, got compute={self.compute!r}, bandwidth={self.bandwidth!r}"
            )
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got batch={self.batch!r}")


def codec_ratio(codec: str, cut_dim: int) -> float:
    """How many times fewer bytes a codec sends than float32 for a row of cut_dim entries."""
    if codec == "none":
        return 1.0
    if codec in ("fp16", "bf16"):
        return 2.0
    if codec == "int8":
        return 4.0 * cut_dim / (cut_dim + 4)
    if codec == "topk":
        return 4.0 * cut_dim / (6 * math.ceil(TOPK_FRACTION * cut_dim))
    raise ValueError(f"codec must be one of none, fp16, bf16, int8, topk, got {codec!r}")


@dataclass(frozen=True)
class Bounds:
    compute: float
    bandwidth: float
    latency: float
    expected: float
    staleness: int
    bound_by: str  # the largest share of a step's time: compute, bandwidth or latency

    def as_dict(self) -> dict:
        return {
            "compute_sps": round(self.compute, 1),
            "bandwidth_sps": _finite(self.bandwidth),
            "latency_sps": _finite(self.latency),
            "expected_sps": round(self.expected, 1),
            "staleness": self.staleness,
            "bound_by": self.bound_by,
        }


def _finite(x: float):
    return None if math.isinf(x) else round(x, 1)


def bounds(link: Link, staleness: int = 0) -> Bounds:
    """The three bounds (samples/s) and the expected rate of a schedule with `staleness` over `link`."""
    if not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness must be an integer >= 0, got staleness={staleness!r}")
    b, inflight = link.batch, staleness + 1
    heavier = max(link.up, link.down)
    bw = link.bandwidth / heavier if heavier > 0 else math.inf
    lat = b * inflight / link.rtt_s if link.rtt_s > 0 else math.inf
    compute_t = b / link.compute
    wire_t = b * (link.up + link.down) / link.bandwidth if not math.isinf(link.bandwidth) else 0.0
    serial_t = compute_t + link.rtt_s + wire_t
    bytes_t = b / bw if bw < math.inf else 0.0
    if staleness == 0:
        t, shares = serial_t, {"compute": compute_t, "bandwidth": wire_t, "latency": link.rtt_s}
    else:
        shares = {"compute": compute_t, "bandwidth": bytes_t, "latency": serial_t / inflight}
        t = max(shares.values())
    return Bounds(link.compute, bw, lat, b / t, staleness, max(shares, key=shares.get))


@dataclass(frozen=True)
class Advice:
    staleness: int
    embedding: str
    gradient: str
    bounds: Bounds

    def describe(self) -> str:
        b = self.bounds
        return (
            f"train.staleness={self.staleness} network.compression.embedding={self.embedding} "
            f"network.compression.gradient={self.gradient}: expected {b.expected:,.0f} samples/s "
            f"(bound by {b.bound_by})"
        )


def advise(link: Link, cut_dim: int) -> Advice:
    """The lightest codecs (none, fp16, int8; then top-k for the gradient) whose bandwidth bound is at least the
    compute bound, and the smallest staleness (of 0, 1, 2, 4, 8) whose expected rate is within 10% of the best of
    them: what the link calls for."""
    embedding, gradient = "none", "none"
    for codec in EMBEDDING_CODECS:
        embedding = codec
        if link.bandwidth / max(link.up / codec_ratio(codec, cut_dim), 1e-12) >= link.compute:
            break
    for codec in GRADIENT_CODECS:
        gradient = codec
        if link.bandwidth / max(link.down / codec_ratio(codec, cut_dim), 1e-12) >= link.compute:
            break
    coded = Link(
        link.rtt_s,
        link.bandwidth,
        link.up / codec_ratio(embedding, cut_dim),
        link.down / codec_ratio(gradient, cut_dim),
        link.compute,
        link.batch,
    )
    best = max(bounds(coded, k).expected for k in STALENESS_CHOICES)
    for k in STALENESS_CHOICES:
        if bounds(coded, k).expected >= 0.9 * best:
            break
    return Advice(k, embedding, gradient, bounds(coded, k))


def report(link: Link, cut_dim: int, staleness: int = 0) -> str:
    """Lines for a person: the link, its three bounds for the given schedule, and what it calls for."""
    b = bounds(link, staleness)
    bw = "unlimited" if math.isinf(link.bandwidth) else f"{link.bandwidth * 8 / 1e6:,.0f} Mbit/s"

    def sps(x: float) -> str:
        return "none" if math.isinf(x) else f"{x:,.0f} samples/s"

    advice = advise(link, cut_dim)
    return "\n".join(
        [
            f"link: {link.rtt_s * 1000:.1f} ms RTT, {bw}; {link.up:.0f} B a sample up, {link.down:.0f} B down, "
            f"batch {link.batch}",
            f"bounds at staleness {staleness}: compute {sps(b.compute)}, bandwidth {sps(b.bandwidth)}, "
            f"latency {sps(b.latency)}; expected {sps(b.expected)} (bound by {b.bound_by})",
            f"the link calls for: {advice.describe()}",
        ]
    )
