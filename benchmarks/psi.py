"""PSI benchmark: where each microsecond per id goes, and the leader/follower ECDH-PSI end to end over CurveZMQ.

1. Stages, in this process on one core (time.process_time): SHA-512 of the domain-separated ids, the hash to the
   group, one scalar multiplication, the batch functions as the protocol calls them (their Python overhead is the
   difference), pickling a worker's batch, and the same stages of suite v1 (x25519-elligator2x2, through PyNaCl)
   for comparison. Core-us per id per side = hash + 2 scalar multiplications (each side masks its own ids and
   raises the other's).
2. End to end: leader and follower in two forked processes over CurveZMQ on 127.0.0.1 (50% overlap), wall seconds,
   CPU seconds of both parties with their worker processes (rusage), core-us per id per side, ids/s per side, bytes;
   each with a reuse cache, then run again on the same sets: the reuse (vfl/align/psi/reuse.py) in seconds.
3. Verified PSI (data.psi_verify, vfl/align/psi/dleq.py), side by side with the unverified one: rounds that run, in
   turn, the unverified PSI, the follower checking the leader's proofs of its doubles, and both parties checking the
   other's proofs, on the same sets in the same run (interleaved, so a changing load on a shared machine falls on
   every variant alike); wall and CPU seconds of each, their medians and the ratios to the unverified PSI.
4. Ranks: 1 rank per party against 2 ranks per party (rank r of each party intersects bucket r of the ids,
   vfl/align/psi/buckets.py), with every rank of both parties pinned to core r: 1 rank uses one core, 2 ranks two.
   Ids/s per side of the slowest rank; the ratio is the scaling.
Prints the CPU model and the load average with every figure; writes runs/bench_psi/bench_psi.json (or --json).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from multiprocessing.reduction import ForkingPickler  # what the worker pool does to a batch

import numpy as np

from benchmarks.common import cpu_model, load_avg, report_json

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# SecretFlow's psi_v2 benchmark (docs/user_guide/psi_v2_benchmark.md): 10^7 x 10^7 ids, Curve25519 ECDH, 114 s on
# 8 cores per party: 114 * 8 / 10^7 = 91 core-us per id per side.
SECRETFLOW_CORE_US = 91.0


def _per_id(fn, n: int, repeat: int = 3) -> float:
    """Best of `repeat` process-CPU microseconds per id of fn()."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def stages(n: int) -> dict:
    """Core-us per id of each stage, suite v2 (this code) and v1 (the former path), in this process."""
    import hashlib

    from vfl.align.psi import ecdh

    ids = np.random.default_rng(1).integers(-(2**62), 2**62, n, dtype=np.int64)
    e = ecdh.new_exponent()
    h = ecdh.digests(ids)
    pts = ecdh.from_digests(h)
    v2 = {
        "sha512": _per_id(lambda: ecdh.digests(ids), n),
        "hash_to_group": _per_id(lambda: ecdh.from_digests(h), n),
        "scalar_mult": _per_id(lambda: ecdh._raise_to(pts, e), n),
        "mask_batch": _per_id(lambda: ecdh._mask_ids(ids, e), n),  # sha512 + hash + mult as the protocol calls it
    }
    v2["per_id_per_side"] = v2["mask_batch"] + v2["scalar_mult"]
    chunk = np.zeros((8192, 32), np.uint8)
    from vfl.align.psi import dleq

    k = min(n, 2000)
    c, d = pts[:k], ecdh._raise_to(pts[:k], e)
    seed = dleq._seed(dleq.public_key(e))
    v2["dleq_prove"] = _per_id(lambda: dleq._composite_part(c, d, seed, 0, False), k)  # d_i, d_i C_i, a sum
    v2["dleq_verify"] = _per_id(lambda: dleq._composite_part(c, d, seed, 0, True), k)  # and d_i D_i, a sum
    v2["pickle_batch"] = (
        _per_id(lambda: ForkingPickler.loads(ForkingPickler.dumps(chunk)), 8192, 20) * 2
    )  # there and back
    # suite v1: h = SHA-512(domain | id), P = E(h[:32]) + E(h[32:]) on Edwards25519, u = (1 + y) / (1 - y) in Python,
    # X25519 (PyNaCl), as the former vfl/align/psi/ecdh.py did per id
    from nacl import bindings as sodium

    raw, p = ids.tobytes(), 2**255 - 19
    dom = b"vfl-psi/ed25519/v1\0"
    hs = [hashlib.sha512(dom + raw[8 * i : 8 * i + 8]).digest() for i in range(n)]
    fu, add = sodium.crypto_core_ed25519_from_uniform, sodium.crypto_core_ed25519_add
    maps = [(fu(x[:32]), fu(x[32:])) for x in hs]
    ys = [int.from_bytes(add(a, b), "little") & ((1 << 255) - 1) for a, b in maps]
    us = [((1 + y) * pow(1 - y, -1, p) % p).to_bytes(32, "little") for y in ys]
    k = os.urandom(32)
    v1 = {
        "sha512": _per_id(lambda: [hashlib.sha512(dom + raw[8 * i : 8 * i + 8]).digest() for i in range(n)], n),
        "two_elligator_maps": _per_id(lambda: [(fu(x[:32]), fu(x[32:])) for x in hs], n),
        "edwards_add": _per_id(lambda: [add(a, b) for a, b in maps], n),
        "to_montgomery_python": _per_id(
            lambda: [((1 + y) * pow(1 - y, -1, p) % p).to_bytes(32, "little") for y in ys], n
        ),
        "scalar_mult": _per_id(lambda: [sodium.crypto_scalarmult(k, u) for u in us], n),
    }
    v1["hash_to_group"] = v1["sha512"] + v1["two_elligator_maps"] + v1["edwards_add"] + v1["to_montgomery_python"]
    v1["per_id_per_side"] = v1["hash_to_group"] + 2 * v1["scalar_mult"]
    return {
        "n": n,
        "load": load_avg()[0],
        "v2": {k: round(v, 2) for k, v in v2.items()},
        "v1": {k: round(v, 2) for k, v in v1.items()},
    }


def _party(
    role: str,
    endpoint: str,
    keys: dict,
    ids: np.ndarray,
    out,
    cache_dir=None,
    core=None,
    rank=None,
    verify=(False, False),
) -> None:
    """One party (or one rank of it: rank = (r, N, the party's whole set size)) over CurveZMQ; its result to out.
    verify: (the leader checks the follower's proofs, the follower checks the leader's), data.psi_verify of each."""
    from vfl.align.psi import ecdh
    from vfl.align.psi.follower_side import follower_psi
    from vfl.align.psi.leader_side import leader_psi
    from vfl.align.psi.reuse import PSICache
    from vfl.distributed.launch import RankEnv
    from vfl.wire import FollowerChannel, LeaderChannel
    from vfl.wire.curve_keys import load_follower_keys, load_leader_keys, load_public_key, load_secret_key

    if core is not None:
        os.sched_setaffinity(0, {core})
    ecdh._pool = None  # this process's own workers (a pool inherited through fork is the parent's)
    me, peer = ("leader", "follower0") if role == "leader" else ("follower0", "leader")
    cache = None
    if cache_dir:
        secret, public = load_secret_key(keys[me][1])[1], load_public_key(keys[peer][0])
        cache = PSICache(os.path.join(cache_dir, me), secret, me, peer, public)
    if role == "leader":
        ch = LeaderChannel(
            endpoint,
            ("follower0",),
            load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
            300.0,
            "leader",
            max_message_bytes=1 << 22,
        )
    else:
        ch = FollowerChannel(
            endpoint,
            "follower0",
            load_follower_keys(keys["follower0"][1], keys["leader"][0]),
            300.0,
            max_message_bytes=1 << 22,
        )
    try:
        env, total = (RankEnv(rank[0], rank[1]), rank[2]) if rank else (RankEnv(), None)
        if role == "leader":
            caches = {"follower0": cache} if cache else None
            common, report = leader_psi(ch, ["follower0"], ids, caches=caches, env=env, total=total, verify=verify[0])
        else:
            common, report = follower_psi(ch, ids, cache=cache, env=env, total=total, verify=verify[1])
        out.put((role, int(common.size), report.seconds, report.bytes_sent + report.bytes_received, report.reused))
    finally:
        ch.close()
        if ecdh._pool:
            ecdh._pool.close()
            ecdh._pool.join()  # so the workers' CPU time reaches this process's rusage, then the benchmark's


def sets(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The leader's and the follower's n ids each, n / 2 of them shared."""
    rng = np.random.default_rng(n)
    universe = rng.choice(2**62, size=n + n // 2, replace=False).astype(np.int64)
    return rng.permutation(universe[:n]), rng.permutation(universe[n // 2 :])


def _pairs(jobs: list[tuple], keys: dict) -> tuple[list, float, float]:
    """Run (role, endpoint, ids, cache_dir, core, rank) jobs as forked processes; (their results, wall s, CPU s)."""
    import vfl.align.psi.leader_side  # noqa: F401 - imported once here, not by each forked party on the clock
    import vfl.wire  # noqa: F401

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_party, args=(role, ep, keys, ids, out, *more)) for role, ep, ids, *more in jobs]
    for p in procs:
        p.start()
    try:
        got = [out.get(timeout=3600) for _ in procs]
        for p in procs:
            p.join(120)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got, wall, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def run(n: int, keys: dict, cache_dir: str) -> dict:
    """The PSI of n ids per side with reuse caches, then the same sets again (reused)."""
    from vfl.ports import free_port

    lead, fol = sets(n)
    load0 = load_avg()[0]
    ep = f"tcp://127.0.0.1:{free_port()}"
    res, wall, cpu = _pairs([("leader", ep, lead, cache_dir, None), ("follower", ep, fol, cache_dir, None)], keys)
    got = {r[0]: r for r in res}
    assert got["leader"][1] == got["follower"][1] == n // 2 and got["leader"][4] == [], got
    ep = f"tcp://127.0.0.1:{free_port()}"
    res, reuse_wall, _ = _pairs([("leader", ep, lead, cache_dir, None), ("follower", ep, fol, cache_dir, None)], keys)
    again = {r[0]: r for r in res}
    assert again["leader"][4] == ["follower0"] and again["leader"][1] == n // 2, again
    return {
        "n": n,
        "seconds": round(wall, 2),
        "psi_seconds_leader": round(got["leader"][2], 2),
        "cpu_seconds": round(cpu, 2),
        "core_us_per_id_per_side": round(cpu / (2 * n) * 1e6, 1),
        "ids_per_second_per_side": round(n / wall),
        "bytes": got["leader"][3],
        "intersection": got["leader"][1],
        "load_before": load0,
        "load_after": load_avg()[0],
        "reuse_psi_seconds": round(max(again["leader"][2], again["follower"][2]), 3),
        "reuse_wall_seconds_with_process_start": round(reuse_wall, 2),
        "reuse_bytes": again["leader"][3],
    }


def reuse_only(n: int, keys: dict, cache_dir: str) -> dict:
    """The reuse of n ids per side alone: both caches written as a checked PSI writes them (one ticket, the true
    intersection), then the two processes agree on it; seconds as each side's report counts them."""
    from vfl.align.psi.reuse import PSICache, new_ticket
    from vfl.ports import free_port
    from vfl.wire.curve_keys import load_public_key, load_secret_key

    lead, fol = sets(n)
    ticket, shared = new_ticket(), np.intersect1d(lead, fol)
    for me, peer, ids in (("leader", "follower0", lead), ("follower0", "leader", fol)):
        secret, public = load_secret_key(keys[me][1])[1], load_public_key(keys[peer][0])
        PSICache(os.path.join(cache_dir, me), secret, me, peer, public).store(ticket, ids, shared)
    load0, ep = load_avg()[0], f"tcp://127.0.0.1:{free_port()}"
    res, wall, cpu = _pairs([("leader", ep, lead, cache_dir, None), ("follower", ep, fol, cache_dir, None)], keys)
    got = {r[0]: r for r in res}
    assert got["leader"][4] == ["follower0"] and got["leader"][1] == got["follower"][1] == n // 2, got
    return {
        "n": n,
        "reuse_psi_seconds": round(max(got["leader"][2], got["follower"][2]), 3),
        "reuse_psi_seconds_follower": round(got["follower"][2], 3),
        "reuse_wall_seconds_with_process_start": round(wall, 2),
        "cpu_seconds_with_process_start": round(cpu, 2),
        "reuse_bytes": got["leader"][3],
        "load_before": load0,
        "load_after": load_avg()[0],
    }


VERIFY_VARIANTS = {  # name: (the leader checks the follower's proofs, the follower checks the leader's)
    "unverified": (False, False),
    "follower_verifies": (False, True),
    "both_verify": (True, True),
}


def verified(n: int, keys: dict, rounds: int) -> dict:
    """The PSI of n ids per side unverified and verified, interleaved round by round on the same sets."""
    from vfl.ports import free_port

    lead, fol = sets(n)
    doc = {"n": n, "rounds": rounds, "load_before": load_avg()[0], "runs": []}
    for i in range(rounds):
        for name, verify in VERIFY_VARIANTS.items():
            ep, load0 = f"tcp://127.0.0.1:{free_port()}", load_avg()[0]
            jobs = [("leader", ep, lead, None, None, None, verify), ("follower", ep, fol, None, None, None, verify)]
            res, wall, cpu = _pairs(jobs, keys)
            got = {r[0]: r for r in res}
            assert got["leader"][1] == got["follower"][1] == n // 2, got
            doc["runs"].append(
                {
                    "round": i,
                    "variant": name,
                    "seconds": round(wall, 2),
                    "psi_seconds": round(max(got["leader"][2], got["follower"][2]), 2),
                    "cpu_seconds": round(cpu, 2),
                    "bytes": got["leader"][3],
                    "load": load0,
                }
            )
            print(
                f"  round {i} {name:>17}: {wall:6.1f} s wall, {cpu:6.1f} CPU s, {got['leader'][3] / 2**20:.1f} MiB, "
                f"load {load0:.2f}",
                flush=True,
            )
    for name in VERIFY_VARIANTS:
        mine = [r for r in doc["runs"] if r["variant"] == name]
        doc[name] = {k: float(np.median([r[k] for r in mine])) for k in ("seconds", "psi_seconds", "cpu_seconds")}
    for name in ("follower_verifies", "both_verify"):
        for k in ("seconds", "cpu_seconds"):
            doc[name][f"{k}_ratio"] = round(doc[name][k] / doc["unverified"][k], 3)
    doc["load_after"] = load_avg()[0]
    return doc


def ranks(n: int, keys: dict) -> dict:
    """1 rank per party against 2 ranks per party, every process pinned to one core, in two layouts: `shared`, rank r
    of both parties on core r (1 rank: both parties on one core; 2 ranks: two cores), and `crossed`, the leader's
    rank r on core r and the follower's on core r + 1 (both counts use every core; on a machine others load, the
    scheduler then favours neither)."""
    from vfl.align.psi.buckets import rank_share
    from vfl.ports import free_port

    lead, fol = sets(n)
    cores = sorted(os.sched_getaffinity(0))
    doc = {"n": n, "cores": len(cores), "load_before": load_avg()[0]}
    for layout, shift in (("shared", 0), ("crossed", 1)):
        for r_count in (1, 2):
            jobs = []
            for r in range(r_count):
                ep, part = f"tcp://127.0.0.1:{free_port()}", (r, r_count, n)
                jobs += [
                    ("leader", ep, rank_share(lead, r, r_count), None, cores[r % len(cores)], part),
                    ("follower", ep, rank_share(fol, r, r_count), None, cores[(r + shift) % len(cores)], part),
                ]
            res, wall, cpu = _pairs(jobs, keys)
            assert sum(x[1] for x in res if x[0] == "leader") == n // 2, res
            slowest = max(x[2] for x in res)
            doc[f"{layout}_ranks_{r_count}"] = {
                "seconds": round(wall, 2),
                "psi_seconds_slowest_rank": round(slowest, 2),
                "cpu_seconds": round(cpu, 2),
                "ids_per_second_per_side": round(n / slowest),
            }
        one, two = doc[f"{layout}_ranks_1"], doc[f"{layout}_ranks_2"]
        doc[f"{layout}_speedup"] = round(two["ids_per_second_per_side"] / one["ids_per_second_per_side"], 2)
    doc["load_after"] = load_avg()[0]
    return doc


def id_counts(text: str) -> list[int]:
    """Comma-separated id counts, each >= 1 (argparse's type: a bad one is one line, naming it)."""
    counts = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not an id count: expected whole numbers >= 1, comma-separated"
            )
        counts.append(int(part))
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sizes", type=id_counts, default="100000,1000000", help="ids per side, comma-separated (empty: stages only)"
    )
    ap.add_argument("--stage-ids", type=int, default=20000, help="ids for the per-stage profile (0: skip)")
    ap.add_argument("--rank-ids", type=int, default=200000, help="ids per side for 1 vs 2 ranks (0: skip)")
    ap.add_argument(
        "--reuse-ids",
        type=id_counts,
        default="",
        help="sizes to time the reuse alone at, caches written directly (e.g. 1000000)",
    )
    ap.add_argument("--verify-ids", type=int, default=100000, help="ids per side for verified vs unverified (0: skip)")
    ap.add_argument("--verify-rounds", type=int, default=3, help="interleaved rounds of the three variants")
    ap.add_argument("--json", default=os.path.join(REPO, "runs", "bench_psi", "bench_psi.json"))
    args = ap.parse_args(argv)
    from vfl.align.psi.ecdh import SUITE
    from vfl.wire.curve_keys import create_key_pair, key_paths

    doc = {
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "suite": SUITE,
        "load_start": load_avg()[0],
        "secretflow_core_us_per_id_per_side": 91.0,
    }
    doc["uptime"] = open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg") else ""
    print(f"CPU: {doc['cpu']}; load average {doc['load_start']:.2f}; suite {SUITE}", flush=True)
    if args.stage_ids:
        s = doc["stages"] = stages(args.stage_ids)
        v1, v2 = s["v1"], s["v2"]
        print(f"per-stage core-us per id, one core, {s['n']} ids, load {s['load']:.2f}:")
        print(
            f"  v2 ristretto255: sha512 {v2['sha512']:.1f} + hash_to_group {v2['hash_to_group']:.1f} + "
            f"2 x scalar_mult {v2['scalar_mult']:.1f}; as batched: mask {v2['mask_batch']:.1f} + raise "
            f"{v2['scalar_mult']:.1f} = {v2['per_id_per_side']:.1f} per id per side; pickling a worker batch "
            f"{v2['pickle_batch']:.2f}"
        )
        print(
            f"  v1 x25519:       sha512 {v1['sha512']:.1f} + 2 Elligator maps {v1['two_elligator_maps']:.1f} + "
            f"Edwards add {v1['edwards_add']:.1f} + Montgomery u in Python {v1['to_montgomery_python']:.1f} + "
            f"2 x X25519 {v1['scalar_mult']:.1f} = {v1['per_id_per_side']:.1f} per id per side"
        )
        print(f"  SecretFlow psi_v2 Curve25519 ECDH (published, 10^7 ids, 8 cores): {SECRETFLOW_CORE_US:.0f}")
        print(
            f"  batched DLEQ (RFC 9497), per value in a chunk: prove (d_i, d_i C_i, sum) {v2['dleq_prove']:.1f}, "
            f"verify (d_i, d_i C_i, d_i D_i, two sums) {v2['dleq_verify']:.1f}"
        )
    doc["runs"] = []
    with tempfile.TemporaryDirectory(prefix="bench-psi-") as tmp:
        keys = {}
        for p in ("leader", "follower0"):
            create_key_pair(p, os.path.join(tmp, "keys"))
            keys[p] = key_paths(os.path.join(tmp, "keys"), p)
        for n in args.sizes:
            r = run(n, keys, os.path.join(tmp, f"cache{n}"))
            doc["runs"].append(r)
            print(
                f"PSI {n:>9} ids/side: {r['seconds']:7.1f} s wall, {r['cpu_seconds']:7.1f} CPU s, "
                f"{r['core_us_per_id_per_side']:.0f} core-us/id/side (SecretFlow {SECRETFLOW_CORE_US:.0f}), "
                f"{r['ids_per_second_per_side']} ids/s/side, "
                f"{r['bytes'] / 2**20:.1f} MiB ({r['bytes'] / (2 * n):.0f} B/id), intersection {r['intersection']}, "
                f"load {r['load_before']:.2f} -> {r['load_after']:.2f}; reused: {r['reuse_psi_seconds']:.3f} s "
                f"({r['reuse_wall_seconds_with_process_start']:.1f} s with process start), {r['reuse_bytes']} B",
                flush=True,
            )
        for n in args.reuse_ids:
            r = reuse_only(n, keys, os.path.join(tmp, f"reuse{n}"))
            doc.setdefault("reuse_only", []).append(r)
            print(
                f"reuse alone, {n} ids/side: {r['reuse_psi_seconds']:.3f} s (follower {r['reuse_psi_seconds_follower']:.3f} s; "
                f"{r['reuse_wall_seconds_with_process_start']:.2f}"
                f" s, {r['cpu_seconds_with_process_start']:.2f} CPU s with process start), {r['reuse_bytes']} B, "
                f"load {r['load_before']:.2f} -> {r['load_after']:.2f}",
                flush=True,
            )
        if args.verify_ids:
            print(f"verified vs unverified PSI, {args.verify_ids} ids/side, {args.verify_rounds} interleaved rounds:")
            v = doc["verified"] = verified(args.verify_ids, keys, args.verify_rounds)
            base = v["unverified"]
            for name in VERIFY_VARIANTS:
                m = v[name]
                ratio = (
                    ""
                    if name == "unverified"
                    else (f" = {m['seconds_ratio']:.2f}x wall, {m['cpu_seconds_ratio']:.2f}x CPU of unverified")
                )
                print(f"  median {name:>17}: {m['seconds']:.1f} s wall, {m['cpu_seconds']:.1f} CPU s{ratio}")
            print(f"  load {v['load_before']:.2f} -> {v['load_after']:.2f} (unverified median {base['seconds']:.1f} s)")
        if args.rank_ids:
            k = doc["ranks"] = ranks(args.rank_ids, keys)
            for layout, where in (
                ("shared", "rank r of both parties on core r"),
                ("crossed", "leader r on core r, follower r on core r+1"),
            ):
                one, two = k[f"{layout}_ranks_1"], k[f"{layout}_ranks_2"]
                print(
                    f"ranks, {k['n']} ids/side, {where} ({k['cores']} cores): 1 rank {one['ids_per_second_per_side']} "
                    f"ids/s/side ({one['psi_seconds_slowest_rank']:.1f} s, {one['cpu_seconds']:.1f} CPU s), 2 ranks "
                    f"{two['ids_per_second_per_side']} ids/s/side ({two['psi_seconds_slowest_rank']:.1f} s, "
                    f"{two['cpu_seconds']:.1f} CPU s): {k[f'{layout}_speedup']:.2f}x",
                    flush=True,
                )
            print(f"  load {k['load_before']:.2f} -> {k['load_after']:.2f}")
    report_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
