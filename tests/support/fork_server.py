"""Party processes forked from a server that loaded torch once: `python -m leader ...` without ~3 CPU-s of imports each.

Most of a small test run's CPU is spent loading torch, numpy and the framework in every party process (about 3
CPU-seconds each on a 2-core Xeon against well under a second of training), and the suite runs on two cores. One
server per test worker imports them once; each party process the tests start with `python -m MODULE ...` is a fork
of it, in its own session (process group), its stdio on the files or pipes the test gave, its own working directory
and environment, running MODULE's `__main__` as the interpreter would. It is a real process that speaks tcp: the
test sees a pid, an exit status (negative: the signal that ended it) and its output, through `ForkedProcess`, which
answers the part of Popen's interface that vfl/local_parties.py and the tests use. Other commands start as usual.

VFL_TEST_FORK_SERVER=0 starts every process with Popen instead. The server takes no bytes from anyone but its own
worker: it listens on a Unix socket in a private (0700) directory.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

FORKABLE = ("leader", "follower", "vfl.")  # `python -m` modules whose processes may be forks of the server
PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",  # torch.optim.Optimizer() imports it on first use: 2 s a party process otherwise
    "torch.utils.tensorboard",
    "zmq",
    "yaml",
    "pandas",
    "nacl.bindings",
    "matplotlib.pyplot",
    "vfl.config.schema",
    "leader.trainer",
    "follower.trainer",
    "vfl.align.psi.follower_side",
    "vfl.align.psi.leader_side",
    "vfl.align.psi.protocol",
)
START_TIMEOUT_S = 120  # the server's imports, on a loaded machine
REPLY_TIMEOUT_S = 30


def _serve(path: str) -> None:
    """The server: preload, listen on `path`, fork one child per request, report each child's exit status."""
    import importlib
    import selectors

    os.environ.setdefault("MPLBACKEND", "Agg")
    for module in PRELOAD:
        importlib.import_module(module)
    assert threading.active_count() == 1, "a preloaded module started a thread: forks would not be safe"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    parent = os.getppid()
    print("ready", flush=True)
    while True:
        for _ready in sel.select(timeout=0.02):
            conn, _ = listener.accept()
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(msg)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                for c in children.values():
                    c.close()
                _child(request, fds)  # never returns
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                try:
                    conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()
        if os.getppid() != parent:  # the worker that started it is gone
            return


def _child(request: dict, fds: list[int]) -> None:
    """In the fork: become the requested `python -m MODULE ARGS` process, then exit with its status."""
    import importlib
    import io
    import runpy
    import signal
    import traceback

    code = 1
    try:
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for target, fd in zip((1, 2), fds):
            os.dup2(fd, target)
        for fd in (null, *fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        # as `python -m` builds sys.path: the working directory, then PYTHONPATH's entries, then the installation's
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *(p for p in sys.path[1:] if p not in extra)]
        importlib.invalidate_caches()
        if "sitecustomize" not in sys.modules:  # as the interpreter's start: a sitecustomize on the new path runs
            try:
                importlib.import_module("sitecustomize")
            except ImportError as e:
                if e.name != "sitecustomize":
                    raise
        sys.argv = [request["module"], *request["args"]]
        code = 0
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, exit 1
            traceback.print_exc()
            code = 1
        try:
            threading._shutdown()  # as the interpreter at exit: wait for non-daemon threads
        except Exception:  # noqa: BLE001
            pass
        import atexit as exit_hooks

        exit_hooks._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


class ForkedProcess:
    """A forked party as the tests see a Popen: pid, poll, wait, communicate, returncode, stdout/stderr pipes."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, stdout, stderr):
        self.args, self.pid, self.returncode = args, pid, None
        self.stdin, self.stdout, self.stderr = None, stdout, stderr
        self._conn, self._buf, self._lock = conn, b"", threading.Lock()
        self._readers: dict[str, threading.Thread] = {}
        self._read: dict[str, str | bytes] = {}

    def _status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            self._conn.settimeout(timeout)
            try:
                while b"\n" not in self._buf:
                    chunk = self._conn.recv(4096)
                    if not chunk:
                        raise RuntimeError(f"the fork server ended before reporting pid {self.pid}'s exit")
                    self._buf += chunk
            except (TimeoutError, BlockingIOError):
                return None
            self.returncode = json.loads(self._buf.split(b"\n", 1)[0])["returncode"]
            self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def communicate(self, input=None, timeout: float | None = None):
        """(stdout, stderr) read to the end (None for a stream that is not a pipe), after the process exited."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and name not in self._readers:
                self._readers[name] = threading.Thread(target=self._drain, args=(name, stream), daemon=True)
                self._readers[name].start()
        for thread in self._readers.values():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self._read.get("stdout"), self._read.get("stderr")

    def _drain(self, name: str, stream) -> None:
        self._read[name] = stream.read()
        stream.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One preloaded server per test process, started at first use and stopped when the process exits."""

    _shared: ForkServer | None = None

    def __init__(self):
        from tests.support.paths import REPO

        self.dir = tempfile.mkdtemp(prefix="vfl-forks-")  # 0700: only this user reaches the socket
        self.path = os.path.join(self.dir, "server.sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fork_server", self.path],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        ready = {}
        reader = threading.Thread(target=lambda: ready.setdefault("line", self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if ready.get("line", "").strip() != "ready":
            self.close()
            raise RuntimeError(f"the fork server did not start within {START_TIMEOUT_S} s")
        atexit.register(self.close)

    @classmethod
    def shared(cls) -> ForkServer:
        if cls._shared is None or cls._shared.proc.poll() is not None:
            cls._shared = cls()
        return cls._shared

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        for name in os.listdir(self.dir) if os.path.isdir(self.dir) else ():
            os.unlink(os.path.join(self.dir, name))
        if os.path.isdir(self.dir):
            os.rmdir(self.dir)

    def launch(self, argv: list[str], cwd, stdout, stderr, env: dict | None, text: bool) -> ForkedProcess:
        """Fork `argv` (`python -m MODULE ARGS`) with Popen's stdout/stderr values: PIPE, DEVNULL, None (this
        process's), a file, or STDOUT for stderr."""
        ours, theirs = {}, {}
        try:
            for name, value in (("stdout", stdout), ("stderr", stderr)):
                if value == subprocess.PIPE:
                    r, w = os.pipe()
                    ours[name] = open(r, "r", encoding="utf-8", errors="replace") if text else open(r, "rb")
                    theirs[name] = w
                elif value == subprocess.STDOUT and name == "stderr":
                    theirs[name] = os.dup(theirs["stdout"])
                elif value == subprocess.DEVNULL:
                    theirs[name] = os.open(os.devnull, os.O_WRONLY)
                elif value is None:
                    theirs[name] = os.dup(1 if name == "stdout" else 2)
                else:
                    theirs[name] = os.dup(value.fileno())
            request = {
                "module": argv[2],
                "args": list(argv[3:]),
                "cwd": os.path.abspath(cwd or os.getcwd()),
                "env": dict(os.environ if env is None else env),
            }
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(REPLY_TIMEOUT_S)
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], [theirs["stdout"], theirs["stderr"]])
            buf = b""
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    raise RuntimeError("the fork server closed the connection before naming the new process")
                buf += chunk
        except BaseException:
            for f in ours.values():
                f.close()
            raise
        finally:
            for fd in theirs.values():
                os.close(fd)
        line, rest = buf.split(b"\n", 1)
        proc = ForkedProcess(argv, conn, json.loads(line)["pid"], ours.get("stdout"), ours.get("stderr"))
        proc._buf = rest
        return proc


def _start_variables_differ(env: dict | None) -> bool:
    """True when env sets a PYTHON* variable that only an interpreter's start reads (PYTHONPATH aside: a fork sets it
    up) differently from this process: such a process must be a fresh interpreter."""
    if env is None:
        return False
    names = {k for k in (*env, *os.environ) if k.startswith("PYTHON") and k != "PYTHONPATH"}
    return any(env.get(k) != os.environ.get(k) for k in names)


def popen(argv, cwd=None, stdout=None, stderr=None, env=None, text=False, start_new_session=True):
    """vfl/local_parties.py's process factory for the tests: forks for `python -m` party modules, else Popen."""
    forkable = (
        len(argv) >= 3
        and argv[0] == sys.executable
        and argv[1] == "-m"
        and argv[2].startswith(FORKABLE)
        and os.environ.get("VFL_TEST_FORK_SERVER", "1") != "0"
        and not _start_variables_differ(env)
    )
    if not forkable:
        return subprocess.Popen(
            argv, cwd=cwd, stdout=stdout, stderr=stderr, env=env, text=text, start_new_session=start_new_session
        )
    return ForkServer.shared().launch(argv, cwd, stdout, stderr, env, text)


if __name__ == "__main__":
    _serve(sys.argv[1])
