"""`python -m privacy.attacks`: score a follower's recorded gradients against the true labels and write leakage.json.

Usage and attacks: privacy/attacks/gradient_scoring.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from privacy.attacks.gradient_scoring import __doc__ as ATTACKS_DOC
from privacy.attacks.gradient_scoring import follower_view_report, leakage_report


def _load_record(path: str) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in ("ids", "epoch", "step", "grad")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m privacy.attacks", description=ATTACKS_DOC.splitlines()[0])
    ap.add_argument("--gradients", required=True, help=".npz written by a follower with debug.record_gradients")
    ap.add_argument("--labels", required=True, help="directory with ids.npy and labels.npy (the leader's train split)")
    ap.add_argument("--eps", type=float, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--extra", default=None, help="JSON object merged into the report (e.g. the model's test AUC)")
    ap.add_argument(
        "--follower-seed", type=int, default=None, help="the follower's train.seed: run the full-view attack"
    )
    ap.add_argument("--compare-gradients", default=None, help="a second recorded release of the same data")
    ap.add_argument("--compare-eps", type=float, default=None)
    args = ap.parse_args(argv)
    if args.follower_seed is not None and args.eps is None:
        ap.error("--follower-seed needs --eps (the bound is 1 - rho(eps))")
    if (args.compare_gradients is None) != (args.compare_eps is None):
        ap.error("--compare-gradients and --compare-eps go together")
    try:
        record = _load_record(args.gradients)
        second = _load_record(args.compare_gradients) if args.compare_gradients else None
        ids = np.load(os.path.join(args.labels, "ids.npy"), allow_pickle=False)
        labels = np.load(os.path.join(args.labels, "labels.npy"), allow_pickle=False)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: cannot read inputs: {e}", file=sys.stderr)
        return 2
    report = leakage_report(record, ids, labels, args.eps)
    if args.follower_seed is not None:
        report.update(follower_view_report(record, ids, labels, args.eps, args.follower_seed, second, args.compare_eps))
    if args.extra:
        report.update(json.loads(args.extra))
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
