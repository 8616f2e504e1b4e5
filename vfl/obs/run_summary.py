"""What a launch script prints when its parties are done.

Each party's warnings, PSI line and label-DP lines, then the run's label-DP summary from metrics.json, so that the
console shows what matters, not only the metric.

    python -m vfl.obs.run_summary OUT PARTY ...   (reads OUT/<party>.log, the last run in it, and OUT/metrics.json)
"""

from __future__ import annotations

import json
import os
import re
import sys

from vfl.obs.logs import message_of

RUN_START = re.compile(r"^(leader|follower) \S+: config, keys and data checked")
KEPT = (
    re.compile(r"PSI intersection"),  # the PSI line
    re.compile(r"^label DP: "),  # the mechanism, eps, flipped share or noise RMSE, the ledger's total; its warnings
    re.compile(r": defaults: sized from the table"),  # the model and schedule sized (vfl/training/table_defaults.py)
)


def party_lines(log_path: str) -> list[str]:
    """The lines of a party's log file that the console summary keeps, from the last run in the file (a log is
    appended to): WARNING and ERROR lines, the PSI line, the label-DP lines and the defaults sized from the table."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    starts = [i for i, ln in enumerate(lines) if RUN_START.match(message_of(ln))]
    out = []
    for ln in lines[starts[-1] if starts else 0 :]:
        level = ln.split(" ", 2)[1] if ln.count(" ") >= 2 else ""
        msg = message_of(ln)
        if level in ("WARNING", "ERROR"):
            out.append(f"{level.lower()}: {msg}")
        elif any(p.search(msg) for p in KEPT):
            out.append(msg)
    return out


def label_dp_line(metrics: dict) -> str | None:
    """One line of the run's label-DP report (metrics.json): mechanism, eps, flipped share or noise RMSE, the
    ledger's total and where the ledger is; None when the run had no label DP."""
    r = metrics.get("label_dp")
    if not isinstance(r, dict):
        return None
    if "noise_rmse" in r:
        changed = f"noise RMSE {r['noise_rmse']:.4g} on the training labels"
    else:
        changed = f"flipped {r.get('flipped_fraction', float('nan')):.4f} of training labels"
    return (
        f"label DP: {r.get('mechanism')} eps={r.get('eps')}; {changed}; ledger total eps "
        f"{r.get('dataset_total_eps', '?')} over {r.get('dataset_releases', '?')} release(s) in {r.get('ledger', '?')}"
    )


def summary(out_dir: str, parties: list[str]) -> list[str]:
    lines = []
    for name in parties:
        for ln in party_lines(os.path.join(out_dir, f"{name}.log")):
            named = re.match(rf"^(\w+: )?(leader|follower) {re.escape(name)}: ", ln)  # already names the party
            lines.append(ln if named else f"{name}: {ln}")
    try:
        with open(os.path.join(out_dir, "metrics.json")) as f:
            metrics = json.load(f)
    except (OSError, ValueError):
        return lines
    ld = label_dp_line(metrics)
    if ld:
        lines.append(f"run: {ld}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m vfl.obs.run_summary OUT PARTY ...", file=sys.stderr)
        return 2
    for line in summary(argv[0], argv[1:]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
