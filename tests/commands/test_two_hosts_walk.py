"""docs/two-hosts.md's walk, run as written: two organisations each in its own directory (its "host"), the leader
listening on 127.0.0.2 and the follower on 127.0.0.1, from keys to a served score. The page's commands are read from
its bash blocks, each under the host its comment names; only the host names, the ports and the number of synthetic
rows are replaced (and `.venv/bin/python` by this interpreter, the same environment)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from tests.support.party_processes import free_port
from tests.support.paths import REPO

PAGE = REPO / "docs" / "two-hosts.md"
LEADER_ADDRESS = "127.0.0.2"
ROWS = 1500  # the page's first try has 20,000; a small pair keeps the walk to seconds
HOSTS = {"leader's host": "leader", "follower's host": "follower", "in one place": "one_place"}


def _routes(address: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def walk_steps(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(section title, [(host, command line)])] of the page's numbered sections; a command's host is named by the
    comment above it (`# on the leader's host`, `# on the follower's host`, `# in one place`), continuations joined."""
    steps = []
    for title, body in re.findall(r"^## (\d\..*?)\n(.*?)(?=^## |\Z)", text, re.S | re.M):
        commands, host = [], None
        for block in re.findall(r"```bash\n(.*?)```", body, re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                if line.startswith("#"):
                    host = next((h for k, h in HOSTS.items() if k in line), host)
                elif line.strip():
                    commands.append((host, re.sub(r"\s+#.*$", "", line).strip()))
        steps.append((title, commands))
    return steps


def _local(line: str, port: int, http_port: int) -> str:
    """The command as this machine runs it: the leader's address and ports, the small pair, this interpreter."""
    line = line.replace("tcp://0.0.0.0:5560", f"tcp://{LEADER_ADDRESS}:{port}")
    line = line.replace("tcp://LEADER_HOST:5560", f"tcp://{LEADER_ADDRESS}:{port}")
    line = line.replace("127.0.0.1:8080", f"127.0.0.1:{http_port}")
    line = line.replace("--rows 20000", f"--rows {ROWS}")
    return line.replace(".venv/bin/python ", shlex.quote(sys.executable) + " ")


def _run(line: str, cwd) -> str:
    r = subprocess.run(line, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120, executable="/bin/bash")
    assert r.returncode == 0, f"{line}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


def _party_pair(procs, commands, dirs, tag: str, timeout: float = 180) -> dict[str, str]:
    """Start the follower's and the leader's command of a step (the follower first), wait for both; their output."""
    out = {}
    for host, line in commands:
        procs.parties.cwd = str(dirs[host])
        procs.start_argv(f"{tag}-{host}", shlex.split(line), log=str(dirs[host] / f"{tag}.out"))
    for host, _ in commands:
        code, _, _ = procs.wait(f"{tag}-{host}", timeout)
        out[host] = (dirs[host] / f"{tag}.out").read_text()
        assert code == 0, f"{tag} on the {host}'s host exited {code}:\n{out[host][-3000:]}"
    return out


@pytest.mark.skipif(not _routes(LEADER_ADDRESS), reason=f"this kernel does not route {LEADER_ADDRESS} to loopback")
def test_the_two_hosts_page_runs_as_written_from_keys_to_a_served_score(tmp_path, procs):
    # Prepare: each host a directory with the clone's examples; the page's commands in order
    dirs = {h: tmp_path / h for h in ("leader", "follower", "one_place")}
    for d in dirs.values():
        d.mkdir()
        os.symlink(REPO / "examples", d / "examples")
    port, http_port = free_port(), free_port()
    steps = dict(walk_steps(PAGE.read_text()))
    titles = list(steps)
    assert [t.split(". ", 1)[1] for t in titles] == [
        "Keys", "Each party's own file", "The link", "Training", "Batch prediction", "Serving",
    ], titles  # fmt: skip
    keys, files, link, train, predict, serve = ([(h, _local(c, port, http_port)) for h, c in steps[t]] for t in titles)
    # Execute 1: keys on each host, then the exchange of the public halves; the fingerprints agree on both hosts
    shows = [(h, c) for h, c in keys if " show " in c]
    for host, line in [(h, c) for h, c in keys if " show " not in c]:
        _run(line, dirs[host])
    shutil.copy(dirs["leader"] / "keys" / "leader.key", dirs["follower"] / "keys" / "leader.key")
    shutil.copy(dirs["follower"] / "keys" / "follower0.key", dirs["leader"] / "keys" / "follower0.key")
    fingerprints = {h: "".join(_run(line, dirs[h]) for _, line in shows) for h in ("leader", "follower")}
    # Execute 2: the matched pair in one place; each party takes only its own file; each prepares alone
    for host, line in files:
        _run(line, dirs[host])
        if "vfl.data split" in line:
            shutil.copy(dirs["one_place"] / "first-try" / "leader.tsv", dirs["leader"] / "leader.tsv")
            shutil.copy(dirs["one_place"] / "first-try" / "follower0.tsv", dirs["follower"] / "follower0.tsv")
    # Execute 3-5: the link check, training and prediction, each a pair of processes
    link_out = _party_pair(procs, link, dirs, "link")
    train_out = _party_pair(procs, train, dirs, "train")
    predict_out = _party_pair(procs, predict, dirs, "predict")
    # Execute 6: serving, one documented request, then Ctrl-C to both
    scored = None
    for host, line in serve:
        if line.startswith("curl"):
            procs.wait_for_line(f"serve-{host}", str(dirs[host] / "serve.out"), "scoring on http://")
            scored = json.loads(_run(line, dirs[host]))
        else:
            procs.parties.cwd = str(dirs[host])
            procs.start_argv(f"serve-{host}", shlex.split(line), log=str(dirs[host] / "serve.out"))
    served = {}
    for host in ("leader", "follower"):
        procs.procs[f"serve-{host}"].send_signal(signal.SIGINT)  # Ctrl-C
        served[host] = procs.wait(f"serve-{host}", 60)[0]
    # Assert: each step did what the page says, on the addresses it was given
    assert fingerprints["leader"] == fingerprints["follower"] and len(fingerprints["leader"].split()) == 2, fingerprints
    assert not (dirs["leader"] / "first-try").exists() and not (dirs["follower"] / "leader.tsv").exists()
    assert sorted(os.listdir(dirs["leader"] / "shards")) == ["leader"]
    assert sorted(os.listdir(dirs["follower"] / "shards")) == ["follower0"]
    assert "link check only (--check-link)" in link_out["leader"] and "RTT" in link_out["leader"]
    metrics = json.loads((dirs["leader"] / "runs" / "leader" / "metrics.json").read_text())
    assert 0 <= metrics["test_auc"] <= 1 and metrics["psi"]["intersection"] == ROWS  # a few steps: any AUC
    assert {"work_seconds", "wait_seconds"} <= set(metrics["psi"]), metrics["psi"]
    assert (dirs["follower"] / "runs" / "follower0" / "checkpoints" / "follower0_final.pt").exists()
    assert f"listening on tcp://{LEADER_ADDRESS}:{port}" in train_out["leader"]
    assert "link to follower0: RTT" in predict_out["leader"] and "timed at its PREDICT_HELLO" in predict_out["leader"]
    assert (dirs["leader"] / "runs" / "leader" / "predict" / "predictions.parquet").exists()
    assert scored is not None and len(scored["scores"]) == 2 and scored["missing"] == [], scored
    assert all(0 <= s <= 1 for s in scored["scores"])
    assert served == {"leader": 0, "follower": 0}, served  # Ctrl-C ends serving cleanly
