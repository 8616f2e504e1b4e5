"""benchmarks/faults.py's own logic, without running a soak: the leader's log as it grows across restarts (the step
it is at, the steps it resumed at, the resynchronisations), and its flags refuse a fault kind it does not know."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import faults as bench
from tests.support.paths import REPO


def test_the_leaders_log_gives_the_global_step_the_resumes_and_the_links_back_across_appends(tmp_path):
    # Prepare: a log written in two parts, the second by a restarted leader, and a line cut in the middle
    path = tmp_path / "leader.log"
    path.write_text("t INFO epoch 0 step 9/10 loss: 0.5\nt INFO epoch 1 step 3/10 loss: 0.4\nt INFO link to foll")
    log = bench.LeaderLog(str(path))
    # Execute
    first, backs_first = log.read(), log.backs
    with open(path, "a") as f:
        f.write("ower0 back after 2.0 s; resending step 13\n")
        f.write("t INFO resumed from /x/checkpoints/leader_step10.pt at global step 10\n")
        f.write("t INFO epoch 1 step 1/10 loss: 0.45\n")
    second = log.read()
    # Assert: epoch 1 step 3 of 10 is global step 13; the resume takes the run back to 10, then 11; a line is read
    # once it is whole
    assert first == 13 and backs_first == 0
    assert second == 11 and log.resumed == [10] and log.backs == 1


def test_an_unknown_fault_kind_is_refused_in_one_line_before_anything_runs():
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.faults", "--kinds", "flap,unplug"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert r.returncode == 2 and "--kinds must name some of" in r.stderr and "unplug" in r.stderr
