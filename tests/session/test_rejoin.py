"""Rejoining after a restart, in memory (vfl/session/rejoin.py): which checkpoint `--resume auto` takes, the step the
parties meet at, the supervisor loop, and the cadence of checkpoints under `--resume auto` (vfl/training/loop.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vfl.config.schema import TrainConfig
from vfl.session.rejoin import common_start, disagreement_line, latest_checkpoint, rejoining
from vfl.training.loop import TrainingLoop
from vfl.wire.resync import PeerRestarted, RejoinRequested


def _checkpoint(out, party: str, step: int, tag: str | None = None) -> str:
    from vfl.training.checkpoint import save_checkpoint

    path = os.path.join(out, "checkpoints", f"{party}_{tag or f'step{step}'}.pt")
    save_checkpoint(path, party, {"w": np.zeros(1)}, 0, step)
    return path


def test_resume_auto_takes_the_newest_periodic_checkpoint_of_its_own_party_at_or_below_the_ceiling(tmp_path):
    # Prepare: steps 3, 6, 9 of follower0, one of the leader at 12, a final checkpoint, and a torn step 15 (its
    # sidecar belongs to another file)
    for step in (3, 6, 9):
        _checkpoint(tmp_path, "follower0", step)
    _checkpoint(tmp_path, "leader", 12)
    _checkpoint(tmp_path, "follower0", 20, tag="final")
    torn = _checkpoint(tmp_path, "follower0", 15)
    with open(torn, "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")  # the header's digest no longer matches the sidecar's
    # Execute / Assert
    assert latest_checkpoint(str(tmp_path), "follower0") == (
        9,
        os.path.join(tmp_path, "checkpoints", "follower0_step9.pt"),
    )
    assert latest_checkpoint(str(tmp_path), "follower0", at_most=8)[0] == 6
    assert latest_checkpoint(str(tmp_path), "follower0", at_most=2) is None
    assert latest_checkpoint(str(tmp_path), "leader")[0] == 12
    assert latest_checkpoint(str(tmp_path / "nowhere"), "leader") is None


def test_the_parties_meet_at_the_smallest_resume_step_and_one_line_says_when_none_is_common():
    # Execute / Assert
    assert common_start({"leader": 9, "follower0": 9, "follower1": 9}) is None
    assert common_start({"leader": 9, "follower0": 6}) == 6
    assert "every party goes back to step 6" in disagreement_line({"leader": 9, "follower0": 6}, 6)
    line = disagreement_line({"leader": 9, "follower0": 0}, 0)
    assert "hold no common checkpoint" in line and "starts again from step 0" in line and "\n" not in line


def test_the_messages_of_a_restart_name_the_party_and_what_to_do():
    # Execute / Assert
    assert "follower0 restarted" in str(PeerRestarted("follower0", 40)) and "--resume auto" in str(
        PeerRestarted("follower0", 40)
    )
    assert RejoinRequested(12).step == 12 and "step 12" in str(RejoinRequested(12))


class _Cfg:
    """The fields of a PartyConfig that rejoining reads."""

    def __init__(self, out):
        from vfl.config.schema import OutputConfig

        self.party = "follower0"
        self.output = OutputConfig(dir=str(out))
        self.train = TrainConfig()

    def model_copy(self, update):
        copy = _Cfg(self.output.dir)
        copy.train = update["train"]
        return copy


class _Log(list):
    def __call__(self, line):
        self.append(line)

    def error(self, line):
        self.append(line)


def test_the_supervisor_loop_runs_again_from_the_latest_checkpoint_at_or_below_each_step_it_is_told(tmp_path):
    # Prepare: checkpoints of steps 3 and 6; the first run is told to go back to step 5, the second to step 0
    for step in (3, 6):
        _checkpoint(tmp_path, "follower0", step)
    told, resumed, log = [5, 0], [], _Log()
    state: dict = {}

    def run_once(cfg) -> int:
        resumed.append(None if cfg.train.resume_from is None else os.path.basename(str(cfg.train.resume_from)))
        if told:
            state["rejoin"] = told.pop(0)
        return 0

    # Execute
    code = rejoining(_Cfg(tmp_path), log, state, run_once)
    # Assert: step 6, then 3 (the latest at or below 5), then none (from step 0), said in one line each
    assert code == 0 and resumed == ["follower0_step6.pt", "follower0_step3.pt", None]
    assert not any("holds no checkpoint" in line for line in log)  # told step 0: a fresh start, said by the leader
    assert sum("--resume auto resumes follower0 from" in line for line in log) == 2


@pytest.mark.parametrize("staleness, expected", [(0, [3, 6, 9]), (2, [4, 8])])
def test_resume_auto_checkpoints_after_the_first_step_a_minute_after_the_last_where_the_schedule_is_drained(
    monkeypatch, staleness, expected
):
    # Prepare: 12 steps of 20 s each (a fake clock), an evaluation every 4 steps, checkpoint_every unset
    import vfl.training.loop as loop_module

    clock = [0.0]
    monkeypatch.setattr(loop_module.time, "monotonic", lambda: clock[0])
    train = TrainConfig(epochs=1, batch_size=4, eval_every_steps=4, staleness=staleness)
    loop = TrainingLoop(train, 48, np.zeros(4), lambda line: None)
    loop.checkpoint_seconds = 60.0
    saved = []

    def step(epoch, i, rows) -> float:
        clock[0] += 20.0
        return 0.5

    # Execute
    loop.run(step, lambda split: np.full(4, 0.5), lambda epoch, gs: saved.append(gs))
    # Assert: staleness 0: every third step (60 s); staleness 2: only where it evaluates (4, 8; not the last step)
    assert saved == expected


def test_an_explicit_checkpoint_every_is_kept_under_resume_auto():
    # Prepare
    train = TrainConfig(epochs=1, batch_size=4, checkpoint_every=5)
    loop = TrainingLoop(train, 48, np.zeros(4), lambda line: None)
    loop.checkpoint_seconds = 0.0  # would checkpoint every step if it were used
    saved = []
    # Execute
    loop.run(lambda e, i, rows: 0.5, lambda split: np.full(4, 0.5), lambda epoch, gs: saved.append(gs))
    # Assert
    assert saved == [5, 10]
