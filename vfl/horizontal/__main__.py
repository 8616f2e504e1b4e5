"""`python -m vfl.horizontal --encrypt TYPE [--laplace-eval-eps E] [--accountant rdp|pld] [--config YAML] [--out DIR]`."""

from __future__ import annotations

import argparse
import sys

from privacy.dp_accountant import ACCOUNTANTS
from vfl.command_name import command_name
from vfl.horizontal.config import ENCRYPT_TYPES, FedConfigError, load_fed_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=command_name("vfl.horizontal"))
    ap.add_argument("--encrypt", choices=ENCRYPT_TYPES, default=None)
    ap.add_argument("--laplace-eval-eps", type=float, default=None, help="turns on privacy_eval_type LAPLACE")
    ap.add_argument("--accountant", choices=ACCOUNTANTS, default=None, help="composes the Gaussian rounds")
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", default="runs/horizontal")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    overrides = {"encrypt_train_type": args.encrypt, "rounds": args.rounds, "accountant": args.accountant}
    if args.laplace_eval_eps is not None:
        overrides.update(privacy_eval_type="LAPLACE", laplace_eval_eps=args.laplace_eval_eps)
    try:
        cfg = load_fed_config(args.config, overrides)
    except FedConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from vfl.horizontal.fedavg import run_fedavg

    m = run_fedavg(cfg, args.out)
    print(f"final test_auc: {m['final_test_auc']:.4f}; privacy totals: {_privacy_line(m['privacy'])}")
    if "laplace_eval" in m:
        le = m["laplace_eval"]
        print(
            f"laplace eval eps={le['laplace_eval_eps']}: AUC clean {le['clean']['auc']:.4f} protected {le['protected']['auc']:.4f}; "
            f"silhouette clean {le['clean']['silhouette']:.4f} protected {le['protected']['silhouette']:.4f}"
        )
    return 0


def _privacy_line(totals: dict) -> str:
    """Per scope: the summed (eps, delta), and the accountant's beside it where Gaussian releases were composed."""
    if not totals:
        return "none"
    parts = []
    for scope, t in totals.items():
        line = f"{scope}: summed eps {t['eps']:.6g} delta {t['delta']:.3g}"
        if "accountant" in t:
            a = t["accountant"]
            line += f", {a['name']} accountant eps {a['eps']:.6g} delta {a['delta']:.3g}"
        parts.append(line)
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
