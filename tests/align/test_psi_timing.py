"""PSI's seconds split in two: the wait for the peers' first PSI message (a party started later) and PSI's own work,
so the cost a report quotes is not the time a follower took to start."""

from __future__ import annotations

import time

import numpy as np

from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi

LATE_START_S = 0.8  # how long after the leader the follower starts (the situation under test, not a synchronisation)


def test_the_leaders_psi_report_keeps_the_wait_for_a_late_follower_apart_from_the_work(tmp_path):
    # Prepare: the leader listens first; its follower starts LATE_START_S later
    rng = np.random.default_rng(3)
    ids = rng.choice(2**62, size=400, replace=False).astype(np.int64)
    leader, follower = _channels(tmp_path)
    channel = follower("follower0")
    try:
        t0 = time.perf_counter()
        thread, box = _in_thread(leader_psi, leader, ["follower0"], ids[:300])
        # Execute
        time.sleep(LATE_START_S)
        _, own = follower_psi(channel, ids[100:])
        thread.join(60)
        elapsed = time.perf_counter() - t0
    finally:
        channel.close()
        leader.close()
    # Assert: the leader waited about LATE_START_S of its seconds; the rest is its work; both are in metrics.json
    assert "error" not in box, box.get("error")
    _, report = box["value"]
    assert LATE_START_S - 0.3 <= report.wait_seconds <= report.seconds <= elapsed
    assert report.work_seconds == report.seconds - report.wait_seconds
    assert own.wait_seconds < report.wait_seconds  # the follower's hello was answered at once
    doc = report.as_dict()
    assert doc["seconds"] == round(report.seconds, 3)  # the total keeps its key
    assert doc["wait_seconds"] == round(report.wait_seconds, 3) and doc["work_seconds"] == round(report.work_seconds, 3)
    timing = report.timing("the followers")
    assert f"{report.seconds:.1f} s (" in timing and "waiting for the followers to start" in timing
