"""`python -m vfl.data.table_plan DIR PARTY=FILE...`: the parties of a local run on your own table, checked before it starts.

Reads every party YAML of DIR (one with role leader), pairs each with its own table (PARTY=FILE) and prints one line per
party, the leader first: `ROLE NAME CONFIG TABLE`, tab-separated (paths may hold spaces). Every problem is a one-line error (exit 2), found before any
process starts: a party without a table or a table without a party, a YAML without data.schema, two leaders or none,
a leader whose network.followers differ from the follower YAMLs, a file that is not there. When several parties name
the same file (a combined table split locally by the parties' schemas: each reads only its declared columns), no
column may be declared by two parties, and only the leader may read the label.
"""

from __future__ import annotations

import glob
import os
import sys


class PlanError(ValueError):
    """A local run that cannot start; the message says which party or file and why."""


def plan(config_dir: str, tables: list[str]) -> list[tuple[str, str, str, str]]:
    """[(role, party, config, table)], the leader first; PlanError naming the first problem."""
    from vfl.config.schema import ConfigError, load_config

    paths = sorted(glob.glob(os.path.join(config_dir, "*.yaml")) + glob.glob(os.path.join(config_dir, "*.yml")))
    parties = {}
    for path in paths:
        try:
            cfg = load_config(path)
        except ConfigError as e:
            raise PlanError(str(e).splitlines()[0] if "\n" not in str(e) else " ".join(str(e).split())) from None
        if cfg.party in parties:
            raise PlanError(f"{path} and {parties[cfg.party][0]} both configure party {cfg.party!r}")
        if cfg.data.schema is None:
            raise PlanError(f"{path}: party {cfg.party} has no data.schema (its table's id, columns and label)")
        parties[cfg.party] = (path, cfg)
    leaders = [p for p, (_, c) in parties.items() if c.role == "leader"]
    if len(leaders) != 1:
        raise PlanError(
            f"{config_dir} must hold exactly one leader YAML (role: leader), found {len(leaders)}: {leaders}"
        )
    leader = leaders[0]
    followers = [p for p in parties if p != leader]
    declared = list(parties[leader][1].network.followers)
    if sorted(declared) != sorted(followers):
        raise PlanError(
            f"the leader's network.followers {declared} differ from the follower YAMLs of {config_dir}: {followers}"
        )
    files = {}
    for spec in tables:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise PlanError(f"--table {spec!r}: expected PARTY=FILE")
        if name not in parties:
            raise PlanError(f"--table {spec}: no party {name!r} in {config_dir} (parties: {sorted(parties)})")
        if name in files:
            raise PlanError(f"--table names party {name!r} twice")
        if not os.path.isfile(path):
            raise PlanError(f"--table {spec}: file not found: {path}")
        files[name] = os.path.abspath(path)
    lacking = [p for p in parties if p not in files]
    if lacking:
        raise PlanError(f"no --table PARTY=FILE for {lacking} (each party brings its own table)")
    _check_shared_files(parties, files)
    order = [leader, *declared]
    return [(parties[p][1].role, p, os.path.abspath(parties[p][0]), files[p]) for p in order]


def _check_shared_files(parties: dict, files: dict) -> None:
    """Parties reading one combined file split it by their schemas: a column belongs to one party only."""
    by_file: dict[str, list[str]] = {}
    for p, f in files.items():
        by_file.setdefault(f, []).append(p)
    for f, names in by_file.items():
        if len(names) < 2:
            continue
        owner: dict[str, str] = {}
        for p in names:
            schema = parties[p][1].data.schema
            for col in schema.columns:
                if col in owner:
                    raise PlanError(
                        f"{os.path.basename(f)} is split between {names}, and both {owner[col]} and {p} declare its "
                        f"column {col!r}: a column belongs to one party (remove it from one data.schema.columns)"
                    )
                owner[col] = p
            if schema.label is not None and schema.label.column in owner:
                raise PlanError(
                    f"the label column {schema.label.column!r} of {f} is declared as a feature by {owner[schema.label.column]}"
                )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m vfl.data.table_plan CONFIG_DIR PARTY=FILE [PARTY=FILE ...]", file=sys.stderr)
        return 2
    try:
        rows = plan(args[0], args[1:])
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for row in rows:
        if any("\t" in field or "\n" in field for field in row):
            print(f"error: a party name or path holds a tab or a newline: {row}", file=sys.stderr)
            return 2
        print("\t".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
