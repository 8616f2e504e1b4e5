"""`python -m leader export` and `python -m follower export`: a party's trained model as ONNX (docs/export.md)."""

from __future__ import annotations

from vfl.inference.export.party_export import ExportError, export_party
from vfl.inference.party_model import ModelLoadError, run_arguments


def export_main(argv: list[str] | None, role: str) -> int:
    """`python -m leader|follower export --config PARTY.yaml --out DIR`: one line on success or on error."""

    from vfl.cli import fail, one_line
    from vfl.command_name import command_name
    from vfl.config.schema import ConfigError, dotted_overrides, load_config
    from vfl.data.errors import DataError
    from vfl.runs.layout import apply_run, check_shard_path, default_checkpoint
    from vfl.training.trained_model import trained_config

    ap = run_arguments(
        f"{command_name(role)} export",
        "Write this party's trained model with its frozen transforms as ONNX (docs/export.md).",
    )
    ap.add_argument("--out", required=True, help="export directory: OUT/<party>/ is written")
    ap.add_argument("overrides", nargs="*", metavar="key.path=value", help="set any config key")
    args = ap.parse_intermixed_args(argv)
    try:
        apply_run(args)  # --run RUN: its shard and keys unless --data / --keys say otherwise
        overrides = {k: v for k, v in (("output.dir", args.run), ("data.path", args.data)) if v is not None}
        cfg = load_config(args.config, {**overrides, **dotted_overrides(args.overrides)}, keys_dir=args.keys)
        if cfg.role != role:
            return fail(f"{args.config} has role {cfg.role!r}; python -m {role} export needs role: {role}", 2)
        check_shard_path(cfg, f"python -m {role} export")
        # the model the checkpoint records (the table recipe's, as training built it), whatever this shard's rows
        cfg = trained_config(cfg, args.checkpoint or default_checkpoint(cfg, cfg.output.dir))
        export_party(cfg, args.out, args.checkpoint)
    except (ConfigError, DataError, ExportError, ModelLoadError) as e:
        return fail(one_line(e), 2)
    except (OSError, RuntimeError, ValueError) as e:  # a user module's ModelError, a full disk, ...
        return fail(f"{role} export: {type(e).__name__}: {one_line(e)}", 1)
    return 0
