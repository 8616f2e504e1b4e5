"""PSI benchmark: time and bytes of the leader/follower ECDH-PSI over CurveZMQ on 127.0.0.1, two processes."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _follower(endpoint: str, keys: dict, ids: np.ndarray, out) -> None:
    from vfl.align.psi.protocol import follower_psi
    from vfl.wire import FollowerChannel
    from vfl.wire.keys import load_follower_keys

    ch = FollowerChannel(
        endpoint,
        "follower0",
        load_follower_keys(keys["follower0"][1], keys["leader"][0]),
        120.0,
        max_message_bytes=1 << 22,
    )
    try:
        common, report = follower_psi(ch, ids)
        out.put((int(common.size), report.seconds))
    finally:
        ch.close()


def run(n: int, keys: dict) -> dict:
    from vfl.align.psi.protocol import leader_psi
    from vfl.ports import free_port
    from vfl.wire import LeaderChannel
    from vfl.wire.keys import load_leader_keys

    rng = np.random.default_rng(n)
    universe = rng.choice(2**62, size=n + n // 2, replace=False).astype(np.int64)
    lead, fol = rng.permutation(universe[:n]), rng.permutation(universe[n // 2 :])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ch = LeaderChannel(
        endpoint,
        ("follower0",),
        load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
        120.0,
        "leader",
        max_message_bytes=1 << 22,
    )
    out = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=_follower, args=(endpoint, keys, fol, out))
    t0 = time.perf_counter()
    child.start()
    try:
        common, report = leader_psi(ch, ["follower0"], lead)
        f_size, _ = out.get(timeout=3600)
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
        ch.close()
    wall = time.perf_counter() - t0
    assert common.size == f_size == n // 2, (common.size, f_size)
    return {
        "n": n,
        "seconds": wall,
        "bytes": report.bytes_sent + report.bytes_received,
        "intersection": int(common.size),
    }


def openmined_reference(n: int) -> dict | None:
    """openmined-psi 2.0.6 (the library the issue names), RAW setup, both roles in one process, if installed."""
    try:
        import private_set_intersection.python as omp
    except ImportError:
        return None
    client_items = [str(i) for i in range(n)]
    server_items = [str(i) for i in range(n // 2, n + n // 2)]
    t0 = time.perf_counter()
    c, s = omp.client.CreateWithNewKey(True), omp.server.CreateWithNewKey(True)
    req = c.CreateRequest(client_items)
    setup = s.CreateSetupMessage(0.0, n, server_items, omp.DataStructure.RAW)
    resp = s.ProcessRequest(req)
    inter = c.GetIntersection(setup, resp)
    seconds = time.perf_counter() - t0
    size = len(req.SerializeToString()) + len(setup.SerializeToString()) + len(resp.SerializeToString())
    assert len(inter) == n // 2
    return {"n": n, "seconds": seconds, "bytes": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100000,1000000", help="ids per side, comma-separated")
    ap.add_argument(
        "--reference-size", type=int, default=10000, help="ids per side for the openmined-psi reference (0: skip)"
    )
    args = ap.parse_args()
    from vfl.align.psi.ecdh import SUITE
    from vfl.wire.keys import create_key_pair, key_paths

    print(f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.2f}")
    print(f"suite {SUITE}; leader and follower in two processes over CurveZMQ on 127.0.0.1; overlap 50%")
    with tempfile.TemporaryDirectory(prefix="bench-psi-") as tmp:
        keys = {}
        for p in ("leader", "follower0"):
            create_key_pair(p, os.path.join(tmp, "keys"))
            keys[p] = key_paths(os.path.join(tmp, "keys"), p)
        for n in (int(x) for x in args.sizes.split(",") if x):
            r = run(n, keys)
            print(
                f"vfl PSI     {n:>9} ids/side: {r['seconds']:8.1f} s  {r['bytes'] / 2**20:8.1f} MiB "
                f"({r['bytes'] / (2 * n):.0f} B/id)  {r['seconds'] / (2 * n) * 1e6:.0f} us/id  intersection {r['intersection']}",
                flush=True,
            )
    if args.reference_size:
        ref = openmined_reference(args.reference_size)
        if ref is None:
            print("openmined-psi not installed (pip install openmined-psi==2.0.6) for the reference line")
        else:
            print(
                f"openmined-psi {ref['n']:>7} ids/side: {ref['seconds']:8.1f} s  {ref['bytes'] / 2**20:8.1f} MiB "
                f"({ref['bytes'] / (2 * ref['n']):.0f} B/id)  {ref['seconds'] / (2 * ref['n']) * 1e6:.0f} us/id "
                f"(P-256, RAW setup, reveal intersection, one process, same CPU)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
