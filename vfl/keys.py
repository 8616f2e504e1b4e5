"""`python -m vfl.keys new PARTY --dir DIR`: create a party's CurveZMQ key pair (see vfl/wire/curve_keys.py)."""

from __future__ import annotations

import argparse
import sys

from vfl.command_name import command_name
from vfl.wire.curve_keys import KeyFileError, create_key_pair, fingerprint, load_public_key


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=command_name("vfl.keys"), description="CurveZMQ key pairs of the parties")
    sub = ap.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new", help="write DIR/PARTY.key (public, for the peers) and DIR/PARTY.key_secret (0600)")
    new.add_argument("party", help="the party's name, as in its YAML (party: ...)")
    new.add_argument("--dir", required=True, help="key directory (created 0700)")
    new.add_argument("--force", action="store_true", help="replace an existing key pair of this party")
    show = sub.add_parser("show", help="print the fingerprint of a public key file")
    show.add_argument("path")
    args = ap.parse_args(argv)
    try:
        if args.command == "new":
            pub, sec = create_key_pair(args.party, args.dir, args.force)
            print(
                f"{args.party}: public key {pub} (give it to the peers), secret key {sec} (mode 0600, keep it here); "
                f"fingerprint {fingerprint(load_public_key(pub))}"
            )
        else:
            print(fingerprint(load_public_key(args.path)))
    except KeyFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
