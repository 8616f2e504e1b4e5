"""A soak of random faults over a front-door run: the front door's parties (examples/wide_deep_criteo) as two processes
over CurveZMQ with `--resume auto`, the follower connected through the shipped relay (vfl/netlink/relay.py); first the
fault-free run, then the same run with N faults at random steps (seeded): relay flaps of a random duration (every
connection reset, new ones refused meanwhile), and `kill -9` of the follower or of the leader, each started again at
once with `--resume auto` as a supervisor would (systemd's Restart=always, a Kubernetes restartPolicy). A fault is
injected once the leader's log shows the run past its step and past the previous fault. Prints each fault, what it
cost (from the fault until the leader, having resynchronised or rejoined, logs a step beyond the one it was at: the
wait, the restart, the steps done again), the steps rolled back, the final test AUC against the fault-free run's, whether the final weights are the
fault-free run's bit for bit, the machine and the load; --json writes it all.

    bash scripts/bench_faults.sh [--rows N] [--faults N] [--seed S] [--epochs N] [--batch-size B]
        [--checkpoint-every K] [--max-flap-s S] [--kinds flap,kill-follower,kill-leader] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

from benchmarks.common import cpu_model, load_text, say, write_json
from benchmarks.runs import prepare
from benchmarks.wan import FOLLOWER_YAML, LEADER_YAML
from vfl.netlink.relay import Relay

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KINDS = ("flap", "kill-follower", "kill-leader")
LOSS_LINE = re.compile(r"epoch (\d+) step (\d+)/(\d+) loss")
RESUMED = re.compile(r"resumed from \S+ at global step (\d+)")
BACK = "link to follower0 back after"
POLL_S = 0.05  # how often the driver reads the leader's log (a benchmark's driver, not a test's synchronisation)


class LeaderLog:
    """The leader's log as it grows (a restarted leader appends to it): the newest global step it logged, and the
    steps it resumed at."""

    def __init__(self, path: str):
        self.path, self.offset, self.step, self.resumed, self.backs = path, 0, 0, [], 0

    def read(self) -> int:
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
        except OSError:
            return self.step
        cut = text.rfind("\n") + 1  # whole lines only
        self.offset += len(text[:cut].encode())
        for line in text[:cut].splitlines():
            m = LOSS_LINE.search(line)
            if m:
                self.step = int(m[1]) * int(m[3]) + int(m[2])
            self.backs += BACK in line
            r = RESUMED.search(line)
            if r:
                self.resumed.append(int(r[1]))
                self.step = int(r[1])
        return self.step


class Parties:
    """The leader and the follower as processes (the follower through the relay); kill -9 and restart by name."""

    def __init__(self, py: str, out: str, shards: str, keys: str, port: int, relay: Relay, overrides: list[str]):
        self.cmds = {
            "leader": [py, "-m", "leader", "--config", LEADER_YAML, "--bind", f"tcp://127.0.0.1:{port}"],
            "follower0": [py, "-m", "follower", "--config", FOLLOWER_YAML, "--connect", relay.endpoint],
        }
        for party, cmd in self.cmds.items():
            cmd += ["--data", f"{shards}/{party}", "--out", out, "--keys", keys, "-q", "--resume", "auto", *overrides]
        self.out, self.procs, self.restarts = out, {}, 0
        os.makedirs(out, exist_ok=True)

    def start(self, party: str) -> None:
        with open(os.path.join(self.out, f"{party}.console"), "a") as console:
            self.procs[party] = subprocess.Popen(
                self.cmds[party], cwd=REPO, stdout=console, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill_and_restart(self, party: str) -> None:
        proc = self.procs[party]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.restarts += 1
        self.start(party)  # the supervisor's restart, at once

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def failed(self) -> str | None:
        for party, p in self.procs.items():
            if p.poll() not in (None, 0):
                return f"{party} exited {p.returncode} (see {os.path.join(self.out, party + '.console')})"
        return None

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run(py, work, shards, tag, overrides, plan, timeout_s) -> dict:
    """One run with the faults of `plan` [(step, kind, flap seconds)]; its metrics, wall time and each fault."""
    from vfl.ports import free_port

    port = free_port()
    out = os.path.join(work, tag)
    relay = Relay(("127.0.0.1", port)).start()
    parties = Parties(py, out, shards, os.path.join(work, "keys"), port, relay, overrides)
    log = LeaderLog(os.path.join(out, "leader.log"))
    faults, pending = [], list(plan)
    t0 = time.monotonic()
    try:
        parties.start("leader")
        parties.start("follower0")
        current = None  # the fault under way: recovered once the leader logs a step beyond the one it was at
        while parties.running():
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"{tag}: over {timeout_s:.0f} s")
            problem = parties.failed()
            if problem:
                raise RuntimeError(f"{tag}: {problem}")
            step = log.read()
            resumed = [] if current is None else log.resumed[current["resumes"] :]
            noticed = current is not None and (resumed if current["kind"] != "flap" else log.backs > current["backs"])
            if noticed and step > current["step"]:  # recovered: the leader dealt with it and is past the step
                current["rolled_back_to"] = min(resumed) if resumed else current["step"]
                current["cost_s"] = round(time.monotonic() - current["t"], 2)
                current = None
            if current is None and pending and step >= pending[0][0]:
                _, kind, flap_s = pending.pop(0)
                current = {"kind": kind, "step": step, "t": time.monotonic(), "resumes": len(log.resumed)}
                current["backs"] = log.backs
                if kind == "flap":
                    current["down_s"] = round(flap_s, 2)
                    relay.drop_all(down_s=flap_s)
                else:
                    parties.kill_and_restart("follower0" if kind == "kill-follower" else "leader")
                faults.append(current)
                say(f"   fault {len(faults)}: {kind}{f' {flap_s:.1f} s' if kind == 'flap' else ''} at step {step}")
            time.sleep(POLL_S)
        problem = parties.failed()
        if problem:
            raise RuntimeError(f"{tag}: {problem}")
    finally:
        parties.stop()
        relay.close()
    wall = time.monotonic() - t0
    for f in faults:
        f.pop("t", None)
        f.pop("resumes", None)
        f.pop("backs", None)
        f.setdefault("rolled_back_to", None)
        f.setdefault("cost_s", None)  # the run ended before it logged a later step
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    return {"out": out, "wall_s": round(wall, 2), "metrics": metrics, "faults": faults, "not_injected": len(pending)}


def same_weights(a: str, b: str) -> bool:
    """Whether every party's final checkpoint state in run directory a equals b's, tensor for tensor."""
    import torch

    from vfl.training.checkpoint import load_checkpoint

    def same(x, y) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return isinstance(y, (list, tuple)) and len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
        return x == y

    for party in ("leader", "follower0"):
        paths = [os.path.join(d, "checkpoints", f"{party}_final.pt") for d in (a, b)]
        if not same(*(load_checkpoint(p)["state"] for p in paths)):
            return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000, help="synthetic front-door rows (default 20000)")
    ap.add_argument("--faults", type=int, default=6, help="random faults in the faulty run (default 6)")
    ap.add_argument("--seed", type=int, default=0, help="the fault schedule's seed (default 0)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--checkpoint-every", type=int, default=10, help="train.checkpoint_every (default 10 steps)")
    ap.add_argument("--max-flap-s", type=float, default=5.0, help="a flap lasts uniform(0.1, this) seconds")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds to draw from (default {','.join(KINDS)})")
    ap.add_argument("--work", default=os.path.join(REPO, "runs", "bench_faults"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        ap.error(f"--kinds must name some of {list(KINDS)}, got {args.kinds!r}")
    py = sys.executable
    say(f"machine: {cpu_model()}, {os.cpu_count()} cores; load {load_text()}")
    shards = prepare(py, args.rows, args.work)
    overrides = [
        f"train.epochs={args.epochs}",
        f"train.batch_size={args.batch_size}",
        f"train.checkpoint_every={args.checkpoint_every}",
        "train.log_every=1",
        "train.allow_short_run=true",
    ]
    say("== the fault-free run")
    clean = run(py, args.work, shards, "clean", overrides, [], args.timeout)
    total = clean["metrics"]["steps"]
    rng = random.Random(args.seed)
    steps = sorted(rng.randint(max(1, total // 10), max(1, total * 9 // 10)) for _ in range(args.faults))
    plan = [(s, rng.choice(kinds), rng.uniform(0.1, args.max_flap_s)) for s in steps]
    say(f"   {total} steps in {clean['wall_s']:.1f} s, test AUC {clean['metrics']['test_auc']:.6f}")
    say(f"== the same run with {len(plan)} faults (seed {args.seed})")
    faulty = run(py, args.work, shards, "faults", overrides, plan, args.timeout)
    identical = same_weights(clean["out"], faulty["out"])
    say("")
    say(f"{'#':>2} {'fault':<14} {'at step':>7} {'rolled back to':>14} {'cost s':>7}")
    for i, f in enumerate(faulty["faults"], 1):
        kind = f["kind"] + (f" {f['down_s']:.1f} s" if f["kind"] == "flap" else "")
        back = "-" if f["rolled_back_to"] is None else str(f["rolled_back_to"])
        cost = "-" if f["cost_s"] is None else f"{f['cost_s']:.1f}"
        say(f"{i:>2} {kind:<14} {f['step']:>7} {back:>14} {cost:>7}")
    say(
        f"fault-free: {clean['wall_s']:.1f} s, test AUC {clean['metrics']['test_auc']:.6f}; with faults: "
        f"{faulty['wall_s']:.1f} s (+{faulty['wall_s'] - clean['wall_s']:.1f} s), test AUC "
        f"{faulty['metrics']['test_auc']:.6f}; final weights bit-identical: {identical}"
        + (f"; {faulty['not_injected']} fault(s) not injected (the run ended first)" if faulty["not_injected"] else "")
    )
    say(f"machine: {cpu_model()}; load {load_text()}")
    if args.json:
        for r in (clean, faulty):
            r["test_auc"] = r["metrics"]["test_auc"]
            r["steps"] = r["metrics"]["steps"]
            del r["metrics"]
        write_json(args.json, {"config": vars(args), "clean": clean, "faults": faulty, "bit_identical": identical})
    return 0


if __name__ == "__main__":
    sys.exit(main())
