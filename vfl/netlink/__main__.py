"""Command line: `python -m vfl.netlink relay ...` (a WAN link as a process) and `bounds ...` (what a link calls for).

    python -m vfl.netlink relay --listen 127.0.0.1:7001 --to 127.0.0.1:7000 --rtt-ms 40 --bandwidth-mbit 100
    python -m vfl.netlink bounds --rtt-ms 40 --bandwidth-mbit 100 --up-bytes 264 --down-bytes 136 \
        --compute-sps 110000 --batch-size 1024 --cut-dim 32
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading

from vfl.command_name import command_name


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"relay": _relay, "bounds": _bounds}[args.cmd](args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _relay(args) -> int:
    from vfl.netlink.relay import LinkSpec, Relay, parse_hostport

    spec = LinkSpec(args.rtt_ms, args.bandwidth_mbit, args.jitter_ms, args.buffer_bytes)
    listen, target = parse_hostport(args.listen, "--listen"), parse_hostport(args.to, "--to")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        relay = Relay(target, spec, listen, seed=args.seed)
    except OSError as e:
        print(f"error: cannot listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return 2
    with relay:
        print(f"relay {relay.address[0]}:{relay.port} -> {target[0]}:{target[1]}: {spec.describe()}", flush=True)
        stop.wait()
    print(f"relay closed: {relay.connections} connection(s), {relay.bytes_up} B up, {relay.bytes_down} B down")
    return 0


def _bounds(args) -> int:
    from vfl.netlink.bounds import Link, report

    bandwidth = args.bandwidth_mbit * 1e6 / 8 if args.bandwidth_mbit > 0 else math.inf
    link = Link(args.rtt_ms / 1000.0, bandwidth, args.up_bytes, args.down_bytes, args.compute_sps, args.batch_size)
    print(report(link, args.cut_dim, args.staleness))
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=command_name("vfl.netlink"), description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay", help="relay TCP connections over an emulated WAN link until SIGINT/SIGTERM")
    r.add_argument("--listen", required=True, metavar="HOST:PORT", help="where the relay accepts connections")
    r.add_argument("--to", required=True, metavar="HOST:PORT", help="where each connection is relayed")
    r.add_argument("--rtt-ms", type=float, default=0.0, help="round-trip propagation delay (RTT/2 each way)")
    r.add_argument("--bandwidth-mbit", type=float, default=0.0, help="each direction's bandwidth (0: unlimited)")
    r.add_argument("--jitter-ms", type=float, default=0.0, help="each one-way delay +- up to this, bytes in order")
    r.add_argument("--buffer-bytes", type=int, default=0, help="bytes held a direction (0: bandwidth x RTT + 4 MiB)")
    r.add_argument("--seed", type=int, default=None, help="seed of the jitter draws")
    b = sub.add_parser("bounds", help="a link's compute / bandwidth / latency bounds and what it calls for")
    b.add_argument("--rtt-ms", type=float, required=True)
    b.add_argument("--bandwidth-mbit", type=float, required=True, help="0: unlimited")
    b.add_argument("--up-bytes", type=float, required=True, help="bytes a training sample, followers to leader")
    b.add_argument("--down-bytes", type=float, required=True, help="bytes a training sample, leader to followers")
    b.add_argument("--compute-sps", type=float, required=True, help="samples/s of the same run on loopback")
    b.add_argument("--batch-size", type=int, default=1024)
    b.add_argument("--cut-dim", type=int, default=8, help="model.bottom.cut_dim (for int8's per-row overhead)")
    b.add_argument("--staleness", type=int, default=0, help="the schedule whose bounds are printed")
    return ap


if __name__ == "__main__":
    sys.exit(main())
