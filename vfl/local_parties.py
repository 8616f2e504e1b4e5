"""The parties of a local run as processes on this machine: started by name, waited for, and ended by process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterable


@dataclass
class PartyFailure:
    """The party that failed first (returncode: its exit status), or the one still running at the deadline
    (returncode None); log: the file its output went to, if any."""

    name: str
    returncode: int | None
    log: str | None
    timeout_s: float | None

    def output(self) -> str:
        """What the party wrote to its log ("" without one)."""
        if self.log is None:
            return ""
        with open(self.log, errors="replace") as f:
            return f.read()

    def describe(self, what: str = "") -> str:
        """'<name><what> exited with status N: <its last 3 log lines>' (or 'did not finish in T s')."""
        why = (
            f"exited with status {self.returncode}"
            if self.returncode is not None
            else f"did not finish in {self.timeout_s} s"
        )
        return f"{self.name}{what} {why}: {' '.join(self.output().strip().splitlines()[-3:])}"


class LocalParties:
    """Named party processes, each started in its own session (so its process group is its own): `procs` maps each
    name to its Popen, in start order; close() (and leaving a `with` block) ends every group still running."""

    process_factory: Callable[..., subprocess.Popen] = subprocess.Popen  # the tests set a launcher of preloaded forks

    def __init__(self, cwd: str | None = None, popen: Callable[..., subprocess.Popen] | None = None):
        """popen: what starts a process, with Popen's arguments (default: the class's process_factory, Popen)."""
        self.cwd = cwd
        self.popen = popen or type(self).process_factory
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, str] = {}

    def __enter__(self) -> "LocalParties":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        stdout=subprocess.DEVNULL,
        stderr=None,
        env: dict[str, str] | None = None,
        text: bool = False,
    ) -> subprocess.Popen:
        """Start `argv` as party `name`. stdout and stderr take Popen's values or a file path, written from the
        start; the path (stderr's, else stdout's) is the party's log, whose tail a failure reports. env: variables
        set over this process's environment."""
        paths = {
            k: os.fspath(v) for k, v in (("stdout", stdout), ("stderr", stderr)) if isinstance(v, (str, os.PathLike))
        }
        files = {}
        try:
            for stream, path in paths.items():
                files[stream] = open(path, "w")  # a file: a pipe nobody reads could fill and block the party
            self.procs[name] = self.popen(
                argv,
                cwd=self.cwd,
                stdout=files.get("stdout", stdout),
                stderr=files.get("stderr", stderr),
                env={**os.environ, **env} if env else None,
                text=text,
                start_new_session=True,
            )
        finally:
            for f in files.values():
                f.close()
        self.logs.pop(name, None)
        if paths:
            self.logs[name] = paths.get("stderr", paths.get("stdout"))
        return self.procs[name]

    def wait(
        self, timeout_s: float | None = None, tick: Callable[[], None] | None = None, stop_at_failure: bool = True
    ) -> PartyFailure | None:
        """Wait until every party has exited; None when each exited 0. Otherwise the first that failed (by exit
        status; with stop_at_failure the others are stopped then) or, past timeout_s, the first still running (all
        are stopped). tick, if given, is called every 0.1 s while waiting."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while any(p.poll() is None for p in self.procs.values()):
            if stop_at_failure and any(p.poll() not in (None, 0) for p in self.procs.values()):
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            if tick is not None:
                tick()
            time.sleep(0.1)
        failed = [n for n, p in self.procs.items() if p.poll() not in (None, 0)]
        running = [n for n, p in self.procs.items() if p.poll() is None]
        if not failed and not running:
            return None
        self.stop()
        name = failed[0] if failed else running[0]
        code = self.procs[name].returncode if failed else None
        return PartyFailure(name, code, self.logs.get(name), timeout_s)

    def wait_for_text(self, path: str, needle: str, timeout_s: float, names: Iterable[str] | None = None,
                      poll_s: float = 0.05) -> bool:  # fmt: skip
        """True once `needle` is in the file at `path`; False when one of `names` (default: every party) exits
        first, or at the deadline."""
        watched = list(self.procs) if names is None else list(names)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    if needle in f.read():
                        return True
            if any(self.procs[n].poll() is not None for n in watched):
                return False
            time.sleep(poll_s)
        return False

    def stop(self, *names: str, grace_s: float = 10.0) -> None:
        """End each named party still running (default: all, in start order) by its process group: SIGTERM, and
        SIGKILL after grace_s seconds (at once when grace_s is 0)."""
        for name in names or list(self.procs):
            p = self.procs[name]
            if p.poll() is not None:
                continue
            if grace_s > 0:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=grace_s)
                    continue
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)

    def close(self, grace_s: float = 10.0) -> None:
        """stop() every party, then close the pipes this process holds to them."""
        self.stop(grace_s=grace_s)
        for p in self.procs.values():
            for stream in (p.stdin, p.stdout, p.stderr):
                if stream:
                    stream.close()
