"""Online scoring benchmark: a leader and a follower `serve` a trained run on 127.0.0.1; p50/p99 latency of 1-row and
100-row requests from one client, then throughput under concurrent clients (100-row requests, keep-alive HTTP), for
each --engines value (onnxruntime and torch, one after the other in one run).

The run (default runs/local: the front door's Wide&Deep on Criteo, `scripts/run_vfl_train_local.sh`) must hold
checkpoints/, shards/ and keys/; a table run of two parties (`scripts/run_table_local.sh --out RUN`) is read from
RUN/configs/parties.tsv (its YAMLs and files). With --new-rows (table runs) each party also serves new customers
(`serve --new-rows`): its training file with every id renamed (`new-<id>`), so the same features reach the model
through the frozen transforms at load time, and the 1-row and 100-row latencies are measured for those ids too. The
follower's rate limit is lifted for the benchmark (--rows-per-s 1e9). With --rtt-ms / --bandwidth-mbit the follower
reaches the leader through the shipped WAN relay (vfl/netlink/relay.py), and the table names the link and the round
trip the leader timed at SERVE_HELLO beside p50/p99 (a request waits at least one round trip). Prints a table with the CPU and the load
average, and writes JSON (default runs/bench_serve/bench_serve.json).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import cpu_model, load_avg, write_json
from vfl.local_parties import LocalParties
from vfl.netlink.relay import LinkSpec, Relay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Client:
    """One keep-alive HTTP connection to the leader's /score."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def score(self, ids: list[int], deadline_ms: int = 2000) -> tuple[int, dict]:
        self.conn.request(
            "POST", "/score", json.dumps({"ids": ids, "deadline_ms": deadline_ms}), {"Content-Type": "application/json"}
        )
        r = self.conn.getresponse()
        return r.status, json.loads(r.read())


def latencies(port: int, ids: np.ndarray, rows: int, requests: int, seed: int) -> np.ndarray:
    """Seconds of `requests` sequential requests of `rows` random ids each."""
    client, rng, out = Client(port), np.random.default_rng(seed), []
    for _ in range(requests):
        batch = rng.choice(ids, rows, replace=False).tolist()
        t0 = time.perf_counter()
        status, doc = client.score(batch)
        out.append(time.perf_counter() - t0)
        if status != 200:
            raise RuntimeError(f"/score answered {status}: {doc}")
    return np.array(out)


def alternating(port: int, sets: dict, rows: int, requests: int, seed: int, rounds: int = 5) -> dict:
    """{name: seconds} of `requests` requests of `rows` ids drawn from each id set, the sets taking turns in `rounds`
    rounds (so a change of the machine's load weighs on each alike)."""
    out: dict = {name: [] for name in sets}
    for r in range(rounds):
        for k, (name, ids) in enumerate(sets.items()):
            out[name].append(latencies(port, ids, rows, max(1, requests // rounds), seed * 1000 + r * 10 + k))
    return {name: np.concatenate(parts) for name, parts in out.items()}


def _load_client(port: int, ids: np.ndarray, rows: int, seconds: float, seed: int, start, results) -> None:
    client, rng, done, lat, errors = Client(port), np.random.default_rng(seed), 0, [], {}
    start.wait()
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        batch = rng.choice(ids, rows, replace=False).tolist()
        t0 = time.perf_counter()
        status, doc = client.score(batch)
        lat.append(time.perf_counter() - t0)
        done += rows if status == 200 else 0
        if status != 200:
            errors[f"{status} {doc.get('error', '')[:80]}"] = errors.get(f"{status} {doc.get('error', '')[:80]}", 0) + 1
    results.put((done, lat, errors))


def throughput(port: int, ids: np.ndarray, rows: int, clients: int, seconds: float) -> dict:
    """Scored rows per second with `clients` processes each sending `rows`-id requests back to back."""
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_load_client, args=(port, ids, rows, seconds, 100 + i, start, results))
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    got = [results.get(timeout=seconds + 60) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(timeout=10)
    lat = np.concatenate([np.array(g[1]) for g in got]) * 1000
    rows_done = sum(g[0] for g in got)
    errors: dict[str, int] = {}
    for g in got:
        for k, v in g[2].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "clients": clients,
        "rows_per_request": rows,
        "seconds": round(wall, 2),
        "rows_per_s": round(rows_done / wall, 1),
        "requests_per_s": round(len(lat) / wall, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
        "errors": errors,
    }


def summary(seconds: np.ndarray) -> dict:
    ms = seconds * 1000
    return {
        "requests": int(ms.size),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
    }


def start_parties(
    args, out: str, port: int, http_port: int, engine: str, follower_endpoint: str | None = None
) -> tuple[LocalParties, str]:
    """The follower, then the leader, serving; (the parties, the leader's log)."""
    endpoint = f"tcp://127.0.0.1:{port}"
    common = ["--keys", os.path.join(args.run, "keys"), "--max-rows", str(args.max_rows), "--engine", engine]
    new = {p: ["--new-rows", f] for p, f in args.new_files.items()}
    common.append(f"output.dir={out}")
    shards, ckpt = os.path.join(args.run, "shards"), os.path.join(args.run, "checkpoints")
    parties = LocalParties(cwd=ROOT)
    parties.start(
        "follower",
        [sys.executable, "-m", "follower", "serve", "--config", args.follower_config,
         "--connect", follower_endpoint or endpoint,
         "--data", os.path.join(shards, args.follower), "--checkpoint", os.path.join(ckpt, f"{args.follower}_final.pt"),
         "--rows-per-s", "1e9", *new.get(args.follower, []), *common],
        stdout=os.path.join(out, "follower.out"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    leader_log = os.path.join(out, "leader.out")
    parties.start(
        "leader",
        [sys.executable, "-m", "leader", "serve", "--config", args.leader_config, "--bind", endpoint,
         "--data", os.path.join(shards, args.leader), "--checkpoint", os.path.join(ckpt, f"{args.leader}_final.pt"),
         "--http", f"127.0.0.1:{http_port}", *new.get(args.leader, []), *common],
        stdout=leader_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return parties, leader_log


def measure(args, out: str, ids: np.ndarray, engine: str, port: int, http_port: int) -> dict | None:
    """Start both parties with `--engine engine` (the follower through a relay of --rtt-ms / --bandwidth-mbit when
    set), measure, stop them; None if they did not start."""
    relay = None
    if args.rtt_ms or args.bandwidth_mbit:
        relay = Relay(("127.0.0.1", port), LinkSpec(args.rtt_ms, args.bandwidth_mbit), seed=0).start()
    parties, leader_log = start_parties(args, out, port, http_port, engine, relay.endpoint if relay else None)
    try:
        if not parties.wait_for_text(leader_log, "scoring on", timeout_s=300, poll_s=0.2):
            print(open(leader_log).read() + open(os.path.join(out, "follower.out")).read(), file=sys.stderr)
            return None
        latencies(http_port, ids, 1, 200, 0)  # warm-up: first-touch pages, allocator, branch caches
        latencies(http_port, ids, 100, 50, 0)
        sets = {"": ids} if args.new_ids is None else {"": ids, "new_": args.new_ids}
        result = {}
        for key, rows, requests, seed in (
            ("one_row", 1, args.requests, 1),
            ("hundred_rows", 100, args.requests // 4, 2),
        ):
            for prefix, seconds in alternating(http_port, sets, rows, max(requests, 50), seed).items():
                result[prefix + key] = summary(seconds)
        result["concurrent"] = throughput(http_port, ids, 100, args.clients, args.seconds)
        timed = re.search(rf"link to {re.escape(args.follower)}: RTT ([0-9.]+) ms", open(leader_log).read())
        result["link"] = {
            "rtt_ms": args.rtt_ms,
            "bandwidth_mbit": args.bandwidth_mbit or None,
            "rtt_ms_timed_at_hello": float(timed.group(1)) if timed else None,
        }
        return result
    finally:
        if relay is not None:
            relay.close()
        parties.stop("leader", "follower", grace_s=15)  # the leader first: it tells the follower that serving stopped


def table_run(args) -> None:
    """args.leader, args.follower (names) and their configs; a table run's from RUN/configs/parties.tsv (args.tables:
    {party: training file}, empty for a Criteo run)."""
    import yaml

    listing = os.path.join(args.run, "configs", "parties.tsv")
    args.tables = {}
    if os.path.isfile(listing):
        lines = [line.rstrip("\n").split("\t") for line in open(listing) if line.strip()]
        if len(lines) != 2:
            raise SystemExit(f"error: {listing}: the benchmark serves two parties, the run has {len(lines)}")
        (_, args.leader, args.leader_config, _), (_, args.follower, args.follower_config, _) = lines
        args.tables = {name: table for _, name, _, table in lines}
    else:
        args.leader = yaml.safe_load(open(args.leader_config))["party"]
        args.follower = yaml.safe_load(open(args.follower_config))["party"]


def new_customers(args, out: str) -> tuple[dict, np.ndarray]:
    """({party: file of new customers}, their int64 ids held by both): each party's training file with its ids
    renamed new-<id>, written under out/."""
    import pandas as pd
    import yaml

    from vfl.data.ids import ids64

    files, held = {}, None
    for party, table in args.tables.items():
        cfg = args.leader_config if party == args.leader else args.follower_config
        id_col = yaml.safe_load(open(cfg))["data"]["schema"]["id"]
        frame = (
            pd.read_parquet(table)
            if table.endswith((".parquet", ".pq"))
            else pd.read_csv(table, sep=None, engine="python")
        )
        frame[id_col] = "new-" + frame[id_col].astype(str)
        files[party] = os.path.join(out, f"new_{party}.csv")
        frame.to_csv(files[party], index=False)
        ids = set(ids64(frame[id_col]).tolist())
        held = ids if held is None else held & ids
    return files, np.array(sorted(held), np.int64)


def main(argv: list[str] | None = None) -> int:
    import yaml

    from vfl.ports import free_port

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="runs/local", help="a trained run: checkpoints/, shards/, keys/")
    ap.add_argument("--leader-config", default="examples/wide_deep_criteo/leader.yaml")
    ap.add_argument("--follower-config", default="examples/wide_deep_criteo/follower.yaml")
    ap.add_argument("--requests", type=int, default=2000, help="sequential requests of 1 row (a quarter: 100 rows)")
    ap.add_argument("--clients", type=int, default=4, help="concurrent client processes for the throughput")
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of the throughput run")
    ap.add_argument("--max-rows", type=int, default=1024, help="the leader's batch (and request) size cap")
    ap.add_argument("--engines", default="onnx,torch", help="serve --engine values to measure, one after the other")
    ap.add_argument("--json", default="runs/bench_serve/bench_serve.json")
    ap.add_argument(
        "--new-rows", action="store_true", help="table runs: serve and measure new customers too (see above)"
    )
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="the follower reaches the leader through a relay of it")
    ap.add_argument("--bandwidth-mbit", type=float, default=0.0, help="the relay's bandwidth each way (0: unlimited)")
    args = ap.parse_args(argv)
    for need in ("checkpoints", "shards", "keys"):
        if not os.path.isdir(os.path.join(args.run, need)):
            print(
                f"error: {args.run}/{need} is missing: train first (bash scripts/run_vfl_train_local.sh)",
                file=sys.stderr,
            )
            return 2
    table_run(args)
    if args.new_rows and not args.tables:
        print(f"error: --new-rows needs a table run ({args.run}/configs/parties.tsv)", file=sys.stderr)
        return 2
    out = os.path.dirname(os.path.abspath(args.json))
    os.makedirs(out, exist_ok=True)
    ids = np.load(os.path.join(args.run, "shards", args.leader, "test", "ids.npy"))
    held = np.load(os.path.join(args.run, "shards", args.follower, "test", "ids.npy"))
    ids = ids[np.isin(ids, held)]  # ids both parties hold: every request is scored in full
    args.new_files, args.new_ids = new_customers(args, out) if args.new_rows else ({}, None)
    load_before = load_avg()
    results = {}
    for engine in args.engines.split(","):
        results[engine] = measure(args, out, ids, engine, free_port(), free_port())
        if results[engine] is None:
            return 1
    doc = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_avg(),
        "run": os.path.abspath(args.run),
        "model": yaml.safe_load(open(args.leader_config)).get("model"),
        "new_rows": bool(args.new_rows),
        "engines": results,
        "targets": {"one_row_p99_ms": 10, "rows_per_s_100_row_requests": 20000},
    }
    write_json(args.json, doc)
    print(f"bench_serve on {doc['cpu']} ({doc['cores']} cores), load {load_before} -> {doc['load_after']}")
    for engine, r in results.items():
        one, hundred, loaded = r["one_row"], r["hundred_rows"], r["concurrent"]
        link = r["link"]
        print(
            f"  --engine {engine}; follower link: "
            + (
                "loopback"
                if not (link["rtt_ms"] or link["bandwidth_mbit"])
                else f"relay of {link['rtt_ms']:g} ms RTT, {link['bandwidth_mbit'] or 'unlimited'} Mbit/s"
            )
            + f" (timed at SERVE_HELLO: {link['rtt_ms_timed_at_hello']} ms)"
        )
        print(
            f"    1-row requests   p50 {one['p50_ms']:.2f} ms  p99 {one['p99_ms']:.2f} ms  ({one['requests']} sequential)"
        )
        print(
            f"    100-row requests p50 {hundred['p50_ms']:.2f} ms  p99 {hundred['p99_ms']:.2f} ms  "
            f"({hundred['requests']} sequential)"
        )
        for key, what in (("new_one_row", "1-row new ids  "), ("new_hundred_rows", "100-row new ids")):
            if key in r:
                print(
                    f"    {what}  p50 {r[key]['p50_ms']:.2f} ms  p99 {r[key]['p99_ms']:.2f} ms  ({r[key]['requests']})"
                )
        print(
            f"    {loaded['clients']} clients x 100-row requests: {loaded['rows_per_s']:.0f} rows/s "
            f"({loaded['requests_per_s']:.0f} requests/s, p50 {loaded['p50_ms']:.1f} ms, p99 {loaded['p99_ms']:.1f} ms)"
        )
    print(f"  targets: p99 < 10 ms for 1 row; >= 20000 rows/s with 100-row requests. JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
