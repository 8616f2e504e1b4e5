"""vfl.local_parties: named party processes report the first failure with its log's tail, a deadline names the first
party still running, and every process group is gone when the parties are closed."""

from __future__ import annotations

import os
import sys
import time

from vfl.local_parties import LocalParties


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _gone(pgid: int, within_s: float = 5.0) -> bool:
    """No live process (zombies aside: this machine's init may not reap them) left in the process group."""
    deadline = time.monotonic() + within_s
    while True:
        live = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue
            state, _, group = stat.rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state != "Z":
                live.append(pid)
        if not live or time.monotonic() > deadline:
            return not live
        time.sleep(0.05)


def test_the_first_party_that_fails_is_reported_with_its_last_log_lines_and_the_others_are_stopped(tmp_path):
    # Prepare: a party that runs for a minute and one that fails after writing four lines
    with LocalParties() as parties:
        slow = parties.start("leader", _py("import time; time.sleep(60)"), stderr=str(tmp_path / "leader.stderr"))
        parties.start(
            "follower0",
            _py("import sys; sys.stderr.write('a\\nb\\nc\\nno such column\\n'); sys.exit(3)"),
            stderr=str(tmp_path / "follower0.stderr"),
        )
        # Execute
        failure = parties.wait(timeout_s=60)
        # Assert: the follower is named with its status and its last 3 lines; the leader's group was ended
        assert failure.name == "follower0" and failure.returncode == 3
        assert failure.describe(" predict") == "follower0 predict exited with status 3: b c no such column"
        assert slow.poll() is not None and _gone(slow.pid)


def test_past_the_deadline_the_first_party_still_running_is_named_and_every_group_ends(tmp_path):
    # Prepare: a finished party, then one that never finishes (and a child of its own, in its group)
    parties = LocalParties(cwd=str(tmp_path))  # the parties run there; log paths are as open() reads them
    parties.start("done", _py("pass"))
    hung = parties.start(
        "stuck",
        _py("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print('waiting', flush=True); time.sleep(60)"),
        stdout=str(tmp_path / "stuck.out"),
    )  # fmt: skip
    # Execute
    seen = parties.wait_for_text(str(tmp_path / "stuck.out"), "waiting", timeout_s=30, names=("stuck",))
    failure = parties.wait(timeout_s=0.5)
    parties.close()
    # Assert
    assert seen and failure.name == "stuck" and failure.returncode is None
    assert failure.describe() == "stuck did not finish in 0.5 s: waiting"
    assert _gone(hung.pid)


def test_parties_that_exit_0_report_nothing_and_without_stop_at_failure_every_party_runs_to_its_end():
    # Prepare
    with LocalParties() as ok, LocalParties() as mixed:
        ok.start("leader", _py("pass"))
        ok.start("follower0", _py("pass"), env={"VFL_UNUSED": "1"})
        mixed.start("leader", _py("import sys; sys.exit(1)"))
        mixed.start("follower0", _py("import time; time.sleep(1)"))
        # Execute
        clean = ok.wait(timeout_s=60)
        failure = mixed.wait(stop_at_failure=False)
    # Assert: the failure is reported only once the follower ended by itself
    assert clean is None
    assert failure.name == "leader" and failure.returncode == 1 and failure.log is None
    assert mixed.procs["follower0"].returncode == 0


def test_wait_for_text_is_false_when_a_watched_party_exits_first(tmp_path):
    # Prepare
    with LocalParties() as parties:
        parties.start("leader", _py("print('starting')"), stdout=str(tmp_path / "leader.out"))
        # Execute / Assert
        assert not parties.wait_for_text(str(tmp_path / "leader.out"), "scoring on", timeout_s=30)
