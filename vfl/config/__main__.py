"""`python -m vfl.config`: print the party YAML's JSON Schema, or check a party YAML and print it with its defaults."""

from __future__ import annotations

import json
import sys

from vfl.command_name import command_name
from vfl.config.schema import ConfigError, dotted_overrides, json_schema, load_config


def main(argv: list[str] | None = None) -> int:
    """`python -m vfl.config schema [--out FILE]` | `python -m vfl.config check FILE [key.path=value ...]`."""
    import argparse

    ap = argparse.ArgumentParser(prog=command_name("vfl.config"), description=main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("schema", help="print the JSON Schema of a party YAML")
    s.add_argument("--out", default=None, help="write it to this file instead of stdout")
    c = sub.add_parser("check", help="validate a party YAML and print it with every default filled in")
    c.add_argument("config")
    c.add_argument("overrides", nargs="*", metavar="key.path=value")
    args = ap.parse_args(argv)
    if args.cmd == "schema":
        text = json.dumps(json_schema(), indent=2)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
        return 0
    try:
        cfg = load_config(args.config, dotted_overrides(args.overrides))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
