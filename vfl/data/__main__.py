"""Command line: `python -m vfl.data synth|split|prepare ...`.

prepare --party NAME --input OWN_FILE: one organisation prepares its own raw file (id column, its
columns, the label only for the leader; TSV or CSV with a header) into OUT/NAME. Without --party,
prepare is the local simulation: the combined file is split into OUT/raw/<party>.tsv and each party
is prepared from its own file (what `split` and `prepare --party` do one by one)."""

from __future__ import annotations

import argparse
import os
import sys

from vfl.command_name import command_name
from vfl.data.errors import DataError


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands = {"synth": _synth, "digits": _digits, "split": _split, "prepare": _prepare}
    try:
        return commands[args.cmd](args)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _synth(args) -> int:
    if args.classes != 2:
        from vfl.data.synth.multiclass import write_synthetic_multiclass

        meta = write_synthetic_multiclass(args.out, args.rows, args.classes, args.seed, args.max_vocab, args.label_seed)
        label = f"{meta['classes']} classes, Bayes-optimal accuracy {meta['bayes_accuracy']:.4f}"
    else:
        from vfl.data.synth.criteo import write_synthetic

        meta = write_synthetic(args.out, args.rows, args.seed, args.max_vocab, args.label_seed)
        label = f"positive rate {meta['positive_rate']:.4f}"
    print(f"wrote {args.out}: {meta['rows']} rows, {label}, {meta['rows'] / meta['seconds']:.0f} rows/s")
    return 0


def _digits(args) -> int:
    from vfl.data.synth.digits import write_digits_shards

    m = write_digits_shards(args.out, args.test_fraction, args.valid_fraction, args.seed, args.force)
    print(
        f"prepared {args.out}: digits, 10 classes, train {m['rows']['train']} rows, valid {m['rows']['valid']} rows, "
        f"test {m['rows']['test']} rows; leader holds the left 4 pixel columns, follower0 the right 4"
    )
    return 0


def _parties_with_drops(args) -> list:
    """The parties YAML (or the default two parties), each --drop PARTY=FRACTION applied."""
    from dataclasses import replace

    from vfl.data.parties import load_parties

    parties = load_parties(args.parties)
    for spec in args.drop:
        name, _, frac = spec.partition("=")
        match = [p for p in parties if p.name == name]
        if not match:
            raise DataError(f"--drop {spec}: unknown party {name!r}; parties: {[p.name for p in parties]}")
        try:
            value = float(frac)
        except ValueError:
            raise DataError(f"--drop {spec}: fraction must be a number in [0, 1)") from None
        if not 0.0 <= value < 1.0:
            raise DataError(f"--drop {spec}: fraction must be in [0, 1), got {value}")
        parties = [replace(p, drop_fraction=value) if p.name == name else p for p in parties]
    return parties


def _split(args) -> int:
    from vfl.data.raw_split import split_raw

    parties = _parties_with_drops(args)
    r = split_raw(args.input, args.out, parties, args.seed, args.strict, args.truth, args.num_classes)
    print(
        f"split {args.input} into "
        + ", ".join(f"{f} ({r['rows'][n]} rows)" for n, f in r["files"].items())
        + f" in {r['seconds']:.1f} s"
    )
    return 0


def _prepare_options(args):
    """The prepare flags as PrepareOptions (both prepare modes take the same ones): each field is the flag of its name,
    truth_path is --truth."""
    from dataclasses import fields

    from vfl.data.prepare import PrepareOptions

    flag = {"truth_path": "truth"}
    return PrepareOptions(**{f.name: getattr(args, flag.get(f.name, f.name)) for f in fields(PrepareOptions)})


def _prepare(args) -> int:
    """prepare --party: one organisation's own file(s); without it, the local simulation on a combined file."""
    if args.config is not None:
        return _prepare_table(args)
    if args.out is None:
        raise DataError("--out is required (without --config, which names the shard directory in data.path)")
    if args.party is not None:
        return _prepare_party(args)
    from vfl.data.prepare import prepare

    if len(args.input) > 1:
        raise DataError(
            f"several --input files ({len(args.input)}) are prepared per party: add --party NAME "
            "(each organisation prepares its own files)"
        )
    args.input = args.input[0]
    parties = _parties_with_drops(args)
    opts = _prepare_options(args)
    if args.reuse and os.path.isdir(args.out):
        from vfl.data.shard_reuse import reusable

        ok, why = reusable(args.out, args.input, parties, opts)
        if ok:
            print(f"reusing prepared shards in {args.out} ({why})")
            return 0
        print(f"preparing again: {why}")
    m = prepare(args.input, args.out, parties, opts)
    rows = m["rows"]
    bayes = m.get("bayes_test_auc")
    print(
        f"prepared {args.out}: train {rows['train']} rows, valid {rows['valid']} rows, test {rows['test']} rows, "
        f"{m['source']['malformed_rows_skipped']} malformed skipped"
        + (f", Bayes-optimal test AUC {bayes:.4f}" if bayes is not None else "")
        + (f", Bayes-optimal test accuracy {m['bayes_test_accuracy']:.4f}" if m.get("bayes_test_accuracy") else "")
    )
    print(
        f"throughput: {m['rows_per_second']:.0f} rows/s (read, transform, write), "
        f"{m['seconds_total']:.2f} s in all, peak RSS {m['peak_rss_mib']:.0f} MiB"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    """The subcommands synth, digits, split and prepare with their flags."""
    ap = argparse.ArgumentParser(prog=command_name("vfl.data"), description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    _add_synth(sub)
    _add_digits(sub)
    _add_split(sub)
    _add_prepare(sub)
    return ap


def _add_synth(sub) -> None:
    """synth: a synthetic Criteo-format TSV with its truth file."""
    s = sub.add_parser("synth", help="write a synthetic Criteo-format TSV plus its truth file")
    s.add_argument("--rows", type=int, required=True)
    s.add_argument(
        "--out", required=True, help="FILE.tsv (FILE.tsv.truth.npy and FILE.tsv.meta.json are written beside it)"
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-vocab", type=int, default=20_000, help="cap on each categorical's cardinality")
    s.add_argument(
        "--label-seed",
        type=int,
        default=None,
        help="seed of the label model and label draws; default: secret, from the OS, not recorded "
        "(a follower that re-runs synth must not regenerate the labels)",
    )
    s.add_argument(
        "--classes",
        type=int,
        default=2,
        help="K > 2: a K-class label (class ids 0..K-1) instead of a click; the truth file then holds P(y=c|x), (rows, K)",
    )


def _add_digits(sub) -> None:
    """digits: scikit-learn's bundled digits as two-party shards."""
    dg = sub.add_parser(
        "digits", help="scikit-learn's bundled 8x8 digits (10 classes) -> two-party shards, left/right halves"
    )
    dg.add_argument("--out", required=True)
    dg.add_argument("--test-fraction", type=float, default=0.2)
    dg.add_argument("--valid-fraction", type=float, default=0.2)
    dg.add_argument("--seed", type=int, default=0)
    dg.add_argument("--force", action="store_true", help="replace an existing output directory")


def _add_split(sub) -> None:
    """split: a combined raw Criteo file into one raw file per party."""
    sp = sub.add_parser("split", help="combined raw Criteo file -> one raw file per party (OUT/<party>.tsv, with ids)")
    sp.add_argument("--input", required=True)
    sp.add_argument("--out", required=True, help="directory for <party>.tsv (and the labelled party's .truth.npy)")
    sp.add_argument("--parties", default=None, help="parties YAML (default: MindSpore splitnn_criteo's two parties)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the public drop rule")
    sp.add_argument("--strict", action="store_true")
    sp.add_argument("--truth", default=None)
    sp.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="PARTY=FRACTION",
        help="that party's file lacks this fraction of ids (repeatable)",
    )
    sp.add_argument("--num-classes", type=int, default=2, help="2: a 0/1 label; K > 2: class ids 0..K-1")


def _add_prepare(sub) -> None:
    """prepare: a party's own raw file or table, or a combined file (the local simulation), into shards."""
    p = sub.add_parser(
        "prepare", help="a party's own raw file (--party) or a combined file (local simulation) -> shards"
    )
    p.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="the raw file; with --party, several files (.gz too: Criteo's day files) are prepared in parallel "
        "processes, one shard set per file, read by training as one dataset",
    )
    p.add_argument("--workers", type=int, default=0, help="with several --input files: processes (0: one per core)")
    p.add_argument(
        "--config",
        default=None,
        help="this party's YAML with data.schema (its id, columns with kinds and transforms, the leader's label): "
        "prepare --input (its own table: CSV, TSV, .gz or Parquet) under that schema into --out/<party>, or into "
        "data.path without --out",
    )
    p.add_argument("--out", default=None, help="output root: the shard lands in OUT/<party>")
    p.add_argument(
        "--party",
        default=None,
        help="prepare only this party's own file (its columns from --parties or the flags below)",
    )
    p.add_argument(
        "--parties",
        default=None,
        help="YAML {party: {dense: [...], categorical: [...], label: bool, drop_fraction: f}}",
    )
    p.add_argument(
        "--dense", default=None, help="with --party: comma-separated dense column names of the file's header"
    )
    p.add_argument("--categorical", default=None, help="with --party: comma-separated categorical column names")
    p.add_argument("--label", action="store_true", help="with --party and column flags: this party holds the labels")
    p.add_argument("--id-column", default="id", help="with --party: name of the id column (default id)")
    p.add_argument("--label-column", default="label", help="with --party: name of the label column (default label)")
    p.add_argument("--test-fraction", type=float, default=0.1, help="share of ids in the test split (reporting only)")
    p.add_argument(
        "--valid-fraction", type=float, default=0.1, help="share of ids in the validation split (model selection)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strict", action="store_true", help="a malformed line is an error instead of being skipped")
    categorical = p.add_mutually_exclusive_group()  # two encodings of the same columns: one or the other
    categorical.add_argument(
        "--hash-buckets", type=int, default=100_000, help="ids per categorical field in hash mode (default)"
    )
    categorical.add_argument(
        "--vocab-min-count",
        type=int,
        default=None,
        help="vocabulary mode: keep values seen at least this often, rarer ones share one id",
    )
    p.add_argument("--truth", default=None, help="true probabilities (.npy); default INPUT.truth.npy when present")
    p.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="PARTY=FRACTION",
        help="simulate a party missing this fraction of rows (repeatable)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep an existing output directory whose source content (sha256), options and parties match; "
        "otherwise prepare (with --force, replacing it)",
    )
    p.add_argument(
        "--num-classes",
        type=int,
        default=2,
        help="2: the label is 0/1 (Criteo); K > 2: the label column holds class ids 0..K-1",
    )


def _prepare_table(args) -> int:
    """prepare --config PARTY.yaml --input OWN_TABLE: one party's own table under the schema of its YAML."""
    from vfl.config.schema import ConfigError, load_config
    from vfl.data.prepare_table import prepare_table

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise DataError(str(e)) from None
    if cfg.data.schema is None:
        raise DataError(
            f"{args.config} has no data.schema: declare the table's id, columns and (leader) label there "
            "(docs/own-table.md), or prepare with --party and the column flags"
        )
    if len(args.input) != 1:
        raise DataError(f"--config prepares one table (--input FILE), got {len(args.input)} files")
    stray = [f for f in ("party", "parties", "dense", "categorical") if getattr(args, f) is not None]
    if stray or args.label or args.drop:
        raise DataError(f"--config takes the columns from data.schema; drop --{(stray or ['label'])[0]}")
    out = os.path.join(args.out, cfg.party) if args.out else cfg.data.path
    task = cfg.train.task if cfg.role == "leader" else None
    m = prepare_table(args.input[0], out, cfg.party, cfg.data.schema, task, _prepare_options(args))
    rows = m["rows"]
    print(
        f"prepared {out} from {args.input[0]} alone ({cfg.party}, {len(m['party']['dense'])} numeric and "
        f"{len(m['party']['categorical'])} categorical fields{', label: ' + task if task else ''}): "
        f"train {rows['train']} rows, valid {rows['valid']} rows, test {rows['test']} rows, "
        f"{m['source']['malformed_rows_skipped']} malformed skipped"
    )
    print(f"throughput: {m['rows_per_second']:.0f} rows/s, {m['seconds_total']:.2f} s in all")
    return 0


def _prepare_party(args) -> int:
    from vfl.data.parties import PartyColumns, load_parties
    from vfl.data.prepare import prepare_party

    if args.drop:
        raise DataError(
            "--drop simulates missing rows in the combined-file mode; a party's own file holds what it holds"
        )
    if args.dense is not None or args.categorical is not None:
        split = lambda v: tuple(c.strip() for c in v.split(",") if c.strip()) if v else ()
        party = PartyColumns(args.party, split(args.dense), split(args.categorical), args.label)
        if not party.dense and not party.categorical and not party.label:
            raise DataError(f"--party {args.party}: no columns given (--dense, --categorical, --label)")
    else:
        match = [p for p in load_parties(args.parties) if p.name == args.party]
        if not match:
            names = [p.name for p in load_parties(args.parties)]
            raise DataError(
                f"--party {args.party!r} is not in {args.parties or 'the default parties'} ({names}); "
                f"name one of them, or give its columns with --dense/--categorical/--label"
            )
        party = match[0]
    opts = _prepare_options(args)
    out = os.path.join(args.out, args.party)
    if len(args.input) > 1:
        from vfl.data.shard_sets import prepare_files

        if args.truth:
            raise DataError(
                "--truth names one file's true probabilities; with several --input files each FILE.truth.npy "
                "beside its file is used"
            )
        if args.workers < 0:
            raise DataError(f"--workers must be >= 0 (0: one per core), got {args.workers}")
        m = prepare_files(args.input, out, party, opts, args.workers, args.id_column, args.label_column)
        rows = m["rows"]
        print(
            f"prepared {out} from {len(args.input)} files in {m['workers']} processes: train {rows['train']} rows, "
            f"valid {rows['valid']} rows, test {rows['test']} rows"
        )
        print(f"throughput: {m['rows_per_second']:.0f} rows/s, {m['seconds_total']:.2f} s in all")
        return 0
    args.input = args.input[0]
    m = prepare_party(args.input, out, party, opts, args.id_column, args.label_column)
    rows = m["rows"]
    bayes = m.get("bayes_test_auc")
    print(
        f"prepared {out} from {args.input} alone: train {rows['train']} rows, valid {rows['valid']} rows, "
        f"test {rows['test']} rows, {m['source']['malformed_rows_skipped']} malformed skipped"
        + (f", Bayes-optimal test AUC {bayes:.4f}" if bayes is not None else "")
    )
    print(
        f"throughput: {m['rows_per_second']:.0f} rows/s, {m['seconds_total']:.2f} s in all, peak RSS {m['peak_rss_mib']:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
