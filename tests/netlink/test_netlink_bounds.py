"""A link's three bounds and its advice (vfl/netlink/bounds.py): the arithmetic on hand-computed links."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.support.paths import REPO
from vfl.netlink.bounds import Link, advise, bounds, codec_ratio

MBIT_100 = 100e6 / 8


def test_the_three_bounds_are_compute_bytes_over_bandwidth_and_batches_in_flight_over_rtt():
    # Prepare: 40 ms, 100 Mbit/s, 250 B up and 125 B down a sample, 20k samples/s alone, batches of 1000
    link = Link(0.04, MBIT_100, 250, 125, 20_000, 1000)
    # Execute
    sync, k4 = bounds(link, 0), bounds(link, 4)
    # Assert
    assert sync.compute == 20_000
    assert sync.bandwidth == pytest.approx(50_000)  # 12.5 MB/s / 250 B
    assert sync.latency == pytest.approx(25_000) and k4.latency == pytest.approx(125_000)
    step = 1000 / 20_000 + 0.04 + 1000 * 375 / MBIT_100  # compute + RTT + both directions' bytes
    assert sync.expected == pytest.approx(1000 / step) and sync.bound_by == "compute"
    assert k4.expected == pytest.approx(20_000) and k4.bound_by == "compute"


def test_a_synchronous_step_on_a_far_link_is_latency_bound_and_staleness_lifts_it():
    # Prepare: compute alone takes 10 ms a step, the round trip 100 ms
    link = Link(0.1, math.inf, 200, 100, 100_000, 1000)
    # Execute
    advice = advise(link, cut_dim=8)
    # Assert
    assert bounds(link, 0).bound_by == "latency"
    assert advice.staleness == 8 and advice.embedding == "none" and advice.gradient == "none"
    assert advice.bounds.expected > 5 * bounds(link, 0).expected


def test_a_narrow_link_calls_for_compression_of_the_heavier_direction():
    # Prepare: 10 Mbit/s = 1.25 MB/s carries 5k samples/s of 250 B; compute alone 15k
    link = Link(0.001, 10e6 / 8, 250, 50, 15_000, 1000)
    # Execute
    advice = advise(link, cut_dim=32)
    # Assert: fp16 (2x) is not enough for 3x, int8 (128 / 36 = 3.6x for 32 columns) is; 50 B down needs nothing
    assert advice.embedding == "int8" and advice.gradient == "none"
    assert codec_ratio("int8", 32) == pytest.approx(128 / 36) and codec_ratio("fp16", 32) == 2.0
    assert codec_ratio("topk", 32) == pytest.approx(128 / 48)  # 8 of 32 entries, 6 bytes each


def test_bad_links_are_refused_in_one_line():
    # Execute / Assert
    with pytest.raises(ValueError, match="rtt_s must be a number >= 0, got rtt_s=-1"):
        Link(-1, 1.0, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="codec must be one of"):
        codec_ratio("zip", 8)
    with pytest.raises(ValueError, match="staleness must be an integer >= 0"):
        bounds(Link(0, 1.0, 1, 1, 1, 1), -1)


def test_the_bounds_command_prints_the_bounds_and_what_the_link_calls_for():
    # Execute
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vfl.netlink",
            "bounds",
            "--rtt-ms",
            "40",
            "--bandwidth-mbit",
            "100",
            "--up-bytes",
            "264",
            "--down-bytes",
            "136",
            "--compute-sps",
            "110000",
            "--cut-dim",
            "32",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Assert
    assert r.returncode == 0, r.stderr
    assert "bounds at staleness 0: compute 110,000 samples/s" in r.stdout
    assert "the link calls for: train.staleness=" in r.stdout
