"""`python -m privacy.label ack-reset --store DIR`: acknowledge a label-DP ledger that was lost or rolled back."""

from __future__ import annotations

import sys

MEANING = (
    "What this means for privacy: the releases the lost ledger recorded are not counted in the totals from now on, "
    "so the budget no longer bounds what these labels have spent; you take responsibility for that spend. Every "
    "release from now on draws new coins (a new label key derived from the key file and a fresh nonce): replays of "
    "releases made before the reset are new releases and add their eps."
)


def main(argv: list[str] | None = None) -> int:
    """`python -m privacy.label ack-reset --store DIR`: record in a new ledger that the store's ledger was lost or
    rolled back (the lost spend is unknown), and draw new coins; the store then opens again."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m privacy.label", description=main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ack-reset", help="acknowledge a lost or rolled-back ledger (the lost spend is not counted)")
    a.add_argument("--store", required=True, help="the label-DP store directory (privacy.label_dp.store_dir)")
    args = ap.parse_args(argv)
    from privacy.label.ledger.ledger_reset import acknowledge_reset
    from privacy.label.ledger.secret_files import LabelDPStoreError

    try:
        done = acknowledge_reset(args.store)
    except LabelDPStoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"label-DP store {done['store']}: reset acknowledged and recorded in its ledger")
    print(f"found: {done['found']}")
    print(f"releases still recorded: {done['releases_kept']}; new coins {done['coins_fingerprint']}")
    if done["ledger_kept_aside"]:
        print(f"the unreadable ledger was kept as {done['ledger_kept_aside']}")
    print(MEANING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
