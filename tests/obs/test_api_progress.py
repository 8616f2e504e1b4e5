"""simulate() shows the run's progress while it waits: the leader's latest log line, at most every N seconds
(a notebook user saw nothing for 11 minutes, 10 of them PSI; issue 30)."""

from __future__ import annotations

import time

from vfl_api.local_run import _Progress


def test_the_latest_new_log_line_is_printed_and_a_quiet_log_prints_nothing_more(tmp_path, capsys):
    # Prepare: a leader log with two lines
    log = tmp_path / "leader.log"
    log.write_text("PSI with follower0: 1000/5000 points\nPSI with follower0: 2000/5000 points, ETA 4 s\n")
    watch = _Progress(str(log), every_s=0.01)
    # Execute
    time.sleep(0.02)
    watch.tick()
    time.sleep(0.02)
    watch.tick()  # nothing new
    # Assert
    assert capsys.readouterr().out == "simulate: PSI with follower0: 2000/5000 points, ETA 4 s\n"


def test_progress_every_zero_prints_nothing(tmp_path, capsys):
    # Prepare
    log = tmp_path / "leader.log"
    log.write_text("epoch 0 step 10/100 loss: 0.5\n")
    # Execute
    _Progress(str(log), every_s=0).tick()
    # Assert
    assert capsys.readouterr().out == ""
