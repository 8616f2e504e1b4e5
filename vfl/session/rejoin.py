"""Rejoining a run after a party's restart (`--resume auto`): each party's latest checkpoint, and the supervisor loop.

A party started with `--resume auto` resumes from its own latest periodic checkpoint (`checkpoints/<party>_step<N>.pt`
in its output.dir, its sidecar written with it; none: step 0) and runs inside a loop of its own, as torchrun's
elastic agent (`torch/distributed/elastic/agent/server/api.py`, `--max-restarts`) restarts its workers: when the run
must start again from a common step, the party closes its channel and runs again from its latest checkpoint at or
below that step, in the same process (PSI's agreement is reused from its cache). The leader decides the step:

- a follower's new process greets a run that waits for it (vfl/wire/leader_channel.py raises PeerRestarted): the leader
  sends every follower REJOIN{its own latest checkpoint's step} and starts again itself;
- a follower of the run that a restarted leader continues reaches it (its RESYNC): the leader answers
  REJOIN{the step it resumed at}; the follower starts again;
- the HELLOs name different resume steps: the leader sends REJOIN{the smallest} and starts again itself.

Each round lowers the step or agrees, so the parties meet at the latest step all of them hold (step 0, a fresh start,
when there is none: one line says so). Exact modes stay exact: a resume from a checkpoint continues bit for bit
(weights, optimizer state, the torch RNG, the batch order), and without `--resume auto` nothing here runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from vfl.training.checkpoint_format import checkpoint_meta
from vfl.wire.resync import PeerRestarted, RejoinRequested

AUTO_CHECKPOINT_S = 60.0  # --resume auto without train.checkpoint_every: a checkpoint about every minute of training
MAX_REJOINS = 100  # rounds one process starts again before it gives up (a party that restarts in a loop)
_PERIODIC = re.compile(r"^(?P<party>.+)_step(?P<step>[0-9]+)\.pt$")

REJOIN_ERRORS = (PeerRestarted, RejoinRequested)


def latest_checkpoint(out_dir: str, party: str, at_most: int | None = None) -> tuple[int, str] | None:
    """(step, path) of `party`'s newest periodic checkpoint in out_dir/checkpoints at or below `at_most` (None: any),
    whose sidecar belongs to it (a torn or copied file is skipped); None when there is none."""
    directory = os.path.join(out_dir, "checkpoints")
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    found: list[tuple[int, str]] = []
    for name in names:
        m = _PERIODIC.match(name)
        if m is None or m["party"] != party:
            continue
        step = int(m["step"])
        if at_most is not None and step > at_most:
            continue
        path = os.path.join(directory, name)
        meta = checkpoint_meta(path)
        if meta is None or meta.get("step") != step or meta.get("party") not in (None, party):
            continue
        found.append((step, path))
    return max(found) if found else None


def common_start(steps: dict[str, int]) -> int | None:
    """The step every party starts again from when their resume steps differ (the smallest); None: they agree."""
    return None if len(set(steps.values())) <= 1 else min(steps.values())


def disagreement_line(steps: dict[str, int], common: int) -> str:
    """What the leader says when the parties' resume steps differ."""
    held = ", ".join(f"{p} {s}" for p, s in steps.items())
    if common == 0:
        return f"rejoin: the parties hold no common checkpoint (latest steps: {held}); the run starts again from step 0"
    return f"rejoin: the parties' latest checkpoints are at steps {held}; every party goes back to step {common}"


def rejoin_step(error: Exception, out_dir: str, party: str, channel) -> int:
    """The step a rejoin goes back to: a follower's, the one its leader named; a leader whose follower restarted, its
    own latest checkpoint's (told to every connected follower)."""
    if isinstance(error, PeerRestarted):
        found = latest_checkpoint(out_dir, party)
        step = found[0] if found else 0
        channel.rejoin_all(step)
        return step
    return error.step


def rejoin_line(error: Exception, step: int) -> str:
    """The line a party under --resume auto logs when its run starts again."""
    if isinstance(error, PeerRestarted):
        return (
            f"rejoin: {error.peer} restarted while the run waited for it at step {error.step}; every party starts "
            f"again from its latest checkpoint at or below step {step}"
        )
    return f"rejoin: the run starts again from every party's latest checkpoint at or below step {step}"


def rejoining(cfg, log, state: dict, run_once: Callable[[object], int]) -> int:
    """Run the party (run_once(cfg) -> exit code) from its latest checkpoint, again from an earlier one each time
    the run must start again (state["rejoin"]: the step, set by the party's body); the exit code of the last run."""
    at_most: int | None = None
    for _ in range(MAX_REJOINS + 1):
        found = latest_checkpoint(str(cfg.output.dir), cfg.party, at_most)
        where = os.path.join(str(cfg.output.dir), "checkpoints")
        if found is not None:
            log(f"rejoin: --resume auto resumes {cfg.party} from {found[1]} (step {found[0]})")
        elif at_most:
            log(f"rejoin: {cfg.party} holds no checkpoint at or below step {at_most} in {where}; starting from step 0")
        elif at_most is None:
            log(f"rejoin: --resume auto finds no checkpoint of {cfg.party} in {where}; starting from step 0")
        state["auto"], state["resume_step"] = True, found[0] if found else 0
        train = cfg.train.model_copy(update={"resume_from": found[1] if found else None})
        code = run_once(cfg.model_copy(update={"train": train}))
        step = state.pop("rejoin", None)
        channel = state.get("channel")
        if channel is not None and step is not None and hasattr(channel, "start_again"):
            channel.start_again()  # the leader's socket stays: a follower's next connection reaches this process
        elif channel is not None:
            state.pop("channel").close()
        if code != 0 or step is None:
            return code
        at_most = step
    log.error(f"error: {cfg.party} started again {MAX_REJOINS} times without finishing the run; stopping")
    return 1
