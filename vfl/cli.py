"""What both party entry points share: arguments, config overrides, and the one-line fatal exit."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from vfl.command_name import command_name

if TYPE_CHECKING:  # the schema (pydantic) is imported after the arguments parse: `--help` stays instant
    from vfl.config.schema import PartyConfig


def party_arguments(prog: str, endpoint_flag: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog,
        epilog="Any config key can be set after the flags as key.path=value, "
        "e.g. train.lr=1e-4 privacy.label_dp.eps=0.5 (`python -m vfl.config schema` lists them).",
    )
    ap.add_argument("--config", required=True, help="party YAML")
    ap.add_argument(
        "overrides", nargs="*", metavar="key.path=value", help="set any config key (after the YAML and flags)"
    )
    ap.add_argument(
        "--set",
        dest="set_pairs",
        action="append",
        default=[],
        metavar="key.path=value",
        help="the same as a positional key.path=value (repeatable)",
    )
    ap.add_argument(
        "-q", "--quiet", action="store_true", help="console: warnings and errors only (the log file keeps all)"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="console: debug lines too, with timestamps")
    ap.add_argument("--out", default=None, help="output directory (overrides output.dir)")
    ap.add_argument(
        endpoint_flag, dest="endpoint", default=None, help="ZeroMQ endpoint tcp://HOST:PORT (overrides the YAML)"
    )
    ap.add_argument("--data", default=None, help="this party's shard directory (overrides data.path)")
    ap.add_argument(
        "--keys",
        default=None,
        metavar="DIR",
        help="CurveZMQ key directory from `python -m vfl.keys new`: DIR/<party>.key_secret and the peers' "
        "DIR/<name>.key (overrides network.secret_key_file, follower_keys, leader_key_file)",
    )
    ap.add_argument("--epochs", type=int, default=None, help="overrides train.epochs")
    ap.add_argument("--timeout", type=float, default=None, help="overrides network.timeout_s")
    ap.add_argument(
        "--resume",
        default=None,
        metavar="PATH|auto",
        help="this party's checkpoint to continue from (overrides train.resume_from); auto: its latest checkpoint in "
        "output.dir/checkpoints (none: from the start), and rejoin the run from the latest step every party holds "
        "whenever a party restarts (docs/long-runs.md)",
    )
    return ap


def load_party_config(args, endpoint_key: str) -> PartyConfig:
    from vfl.config.schema import dotted_overrides, load_config

    overrides = {}
    for key, value in (
        (f"network.{endpoint_key}", args.endpoint),
        ("output.dir", args.out),
        ("data.path", args.data),
        ("train.epochs", args.epochs),
        ("network.timeout_s", args.timeout),
        ("train.resume_from", None if args.resume == "auto" else args.resume),
    ):
        if value is not None:
            overrides[key] = value
    overrides.update(dotted_overrides([*getattr(args, "overrides", []), *getattr(args, "set_pairs", [])]))
    return load_config(args.config, overrides, keys_dir=args.keys)


def party_keys(cfg: PartyConfig):
    """This party's CurveZMQ keys (LeaderKeys or FollowerKeys); ConfigError naming what is missing or wrong."""
    from vfl.config.schema import ConfigError
    from vfl.wire.curve_keys import KeyFileError, load_follower_keys, load_leader_keys

    net = cfg.network
    missing = [] if net.secret_key_file else [f"network.secret_key_file (this party's {cfg.party}.key_secret)"]
    if cfg.is_leader:
        missing += [f"network.follower_keys.{f}" for f in net.followers if f not in net.follower_keys]
    elif not net.leader_key_file:
        missing.append("network.leader_key_file (the leader's public key)")
    if missing:
        raise ConfigError(
            f"{cfg.party} has no CurveZMQ keys configured: set {', '.join(missing)}, or pass --keys DIR "
            f"(this party's own key pair: `python -m vfl.keys new {cfg.party} --dir DIR`; each peer's public key "
            f"DIR/<peer>.key: obtained from that peer; docs/two-hosts.md)"
        )
    try:
        if cfg.is_leader:
            return load_leader_keys(net.secret_key_file, {f: net.follower_keys[f] for f in net.followers})
        return load_follower_keys(net.secret_key_file, net.leader_key_file)
    except KeyFileError as e:
        raise ConfigError(str(e)) from None


def check_own_shard(cfg: PartyConfig, shard) -> None:
    """The shard at data.path was prepared for this party (it records the party's name) and holds its columns."""
    from vfl.data.errors import DataError

    if shard.name != cfg.party:
        raise DataError(
            f"data.path {cfg.data.path} is the shard of party {shard.name!r}, not of {cfg.party!r}; "
            f"give each party its own directory OUT/<party> of `python -m vfl.data prepare`"
        )
    shard.check_columns(cfg.data.dense, cfg.data.categorical)


def check_rank_options(cfg: PartyConfig, distributed: bool) -> None:
    """Options that need one process per party: a ConfigError under N ranks (both roles check the same)."""
    from vfl.config.schema import ConfigError

    if distributed and cfg.train.microbatches > 1:  # DDP all-reduces on every backward: one per step only
        raise ConfigError(
            f"train.microbatches={cfg.train.microbatches} needs --ranks 1; with N ranks use microbatches: 1"
        )
    if distributed and cfg.train.staleness != 0:  # every rank's DDP all-reduce assumes one synchronous step
        raise ConfigError(f"train.staleness={cfg.train.staleness} needs --ranks 1; with N ranks use staleness: 0")


def one_line(e: BaseException) -> str:
    text = str(e) or e.__class__.__name__
    return " ".join(text.split())


def fail(reason: str, code: int = 1) -> int:
    print(f"error: {reason}", file=sys.stderr, flush=True)
    return code


def config_or_exit(args, endpoint_key: str) -> PartyConfig | int:
    from vfl.config.schema import ConfigError

    try:
        cfg = load_party_config(args, endpoint_key)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    try:
        os.makedirs(cfg.output.dir, exist_ok=True)
        probe = os.path.join(cfg.output.dir, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as e:
        return fail(f"output.dir {cfg.output.dir!r} cannot be used for writing: {e.strerror or e}", 2)
    return cfg


def trained_party_config(args, role: str, command: str) -> tuple[PartyConfig, list[str]] | int:
    """The config of a command on a trained party (`predict`, `serve`): --run's shard and keys filled in, the role and
    the shard directory checked; (config, the flags --run filled) or the exit code after a one-line error."""
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.runs.layout import apply_run, check_shard_path, default_checkpoint
    from vfl.training.trained_model import trained_config

    try:
        found = apply_run(args)  # --run RUN: its shard and keys unless --data / --keys say otherwise
    except ConfigError as e:
        return fail(str(e), 2)
    args.out, args.epochs, args.resume, args.set_pairs = args.run, None, None, []
    cfg = config_or_exit(args, "bind" if role == "leader" else "connect")
    if isinstance(cfg, int):
        return cfg
    if cfg.role != role:
        return fail(f"{args.config} has role {cfg.role!r}; python -m {role} {command} needs role: {role}", 2)
    try:
        check_shard_path(cfg, f"python -m {role} {command}")
        # the model the checkpoint records (the table recipe's, as training built it), whatever this shard's rows
        cfg = trained_config(cfg, getattr(args, "checkpoint", None) or default_checkpoint(cfg, cfg.output.dir))
    except (ConfigError, DataError) as e:
        return fail(str(e), 2)
    return cfg, found


def run_party(cfg: PartyConfig, log, body, abort) -> int:
    """Run body(); on a fatal error call abort(reason) (tell the peers), log one line, return the exit code.

    Shared by both party entry points so that every failure looks the same: `error: <reason>` on
    stderr and in the party's log, exit 2 for configuration errors, 1 otherwise, 130 on Ctrl-C.
    The process group of N ranks is released on the way out, whatever happened (release_process_group).
    """
    try:
        return _run_guarded(cfg, log, body, abort)
    finally:
        from vfl.distributed.context import release_process_group

        try:
            release_process_group()
        except BaseException as e:  # the exit code stays the run's
            log.warning(f"warning: releasing the process group of the ranks failed: {one_line(e)}")


def abort_peers(state: dict, reason: str) -> None:
    """Tell the peers of a command's channel (state["channel"], if it has one yet) why this party stops: a leader's
    channel tells every follower (abort_all), a follower's the leader (abort)."""
    channel = state.get("channel")
    if channel is not None:
        (getattr(channel, "abort_all", None) or channel.abort)(reason)


def close_command(state: dict, log) -> None:
    """Close what a command's body left open in state (its channel, its reader of new rows), then its log."""
    for key in ("channel", "rows"):
        if key in state:
            state[key].close()
    log.close()


def peer_reason(party: str, e: BaseException) -> str | None:
    """The ABORT reason the peers are told of a failure (None: a PeerAbort, which they sent): the project's own
    sentences as they are; the budget's and the key store's details, a library's text or a traceback never (they
    may name this party's paths, config values and ledger), only what kind of stop it was."""
    from privacy.label.ledger.store import LabelDPBudgetError, LabelDPStoreError
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.wire import PeerAbort, WireError

    if isinstance(e, PeerAbort):
        return None
    if isinstance(e, LabelDPBudgetError):
        return f"{party}: the leader's label-DP budget for this dataset is spent (details in the leader's log)"
    if isinstance(e, LabelDPStoreError):
        return f"{party}: the leader's label-DP key store cannot be used (details in the leader's log)"
    if isinstance(e, (ConfigError, DataError, WireError)):
        return f"{party}: {one_line(e)}"
    if isinstance(e, (FloatingPointError, RuntimeError, ValueError, OSError)):
        return stopped_reason(party, e)
    if isinstance(e, KeyboardInterrupt):
        return f"{party} interrupted"
    return internal_error_reason(party)


def _run_guarded(cfg: PartyConfig, log, body, abort) -> int:
    """run_party without the release: the exit code of body(), every failure worded once."""
    from privacy.label.ledger.store import LabelDPBudgetError, LabelDPStoreError
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.wire import PeerAbort, WireError

    try:
        body()
        return 0
    except PeerAbort as e:  # the peer already knows; just report its reason
        log.error(f"error: {one_line(e)}")
        return 1
    except (LabelDPBudgetError, LabelDPStoreError) as e:  # the totals and key path stay in the leader's log
        abort(peer_reason(cfg.party, e))
        log.error(f"error: {one_line(e)}")
        return 1
    except (ConfigError, DataError, WireError) as e:  # the project's own sentences: the peers read them as they are
        log.error(f"error: {one_line(e)}")  # in our log before the peers hear of it (they may stop us right after)
        abort(peer_reason(cfg.party, e))
        return 2 if isinstance(e, ConfigError) else 1
    except (FloatingPointError, RuntimeError, ValueError, OSError) as e:  # may quote our paths and config values
        log.error(f"error: {one_line(e)}")
        abort(peer_reason(cfg.party, e))
        return 1
    except KeyboardInterrupt as e:
        abort(peer_reason(cfg.party, e))
        log.error("error: interrupted")
        return 130
    except Exception as e:  # a bug, or input no check foresaw: still one line and an ABORT, never a bare traceback
        import traceback

        reason = f"unexpected {type(e).__name__}: {one_line(e)}"
        log.file_only(traceback.format_exc())
        log.error(f"error: {reason} (traceback in {cfg.party}.log)")
        abort(peer_reason(cfg.party, e))  # the peers get the project's words; the exception stays in our log
        return 1


STOP_CATEGORIES = (
    (FloatingPointError, "a numerical error (a loss or value became non-finite)"),
    (FileNotFoundError, "a file it needs is missing"),
    (PermissionError, "a file it needs cannot be accessed"),
    (TimeoutError, "an operation timed out"),
    (OSError, "a file or system error"),
    (ValueError, "an invalid value"),
    (RuntimeError, "a runtime error"),
)


def stopped_reason(party: str, e: BaseException) -> str:
    """The ABORT reason of an error the project did not word itself (a ValueError, RuntimeError, OSError or
    FloatingPointError of a library or of ours): its category only, since its text may quote this party's paths and
    config values; the text stays in the party's log."""
    if "OutOfMemory" in type(e).__name__:
        category = "out of accelerator memory"
    else:
        category = next((c for t, c in STOP_CATEGORIES if isinstance(e, t)), "an error")
    return f"{party} stopped: {category} (details in its log)"


def internal_error_reason(party: str) -> str:
    """The ABORT reason of an unexpected exception: no Python text (it may quote paths, values or state) reaches a
    peer."""
    return f"{party} stopped on an internal error; see its log"


def party_main(argv: list[str] | None, role: str, endpoint_flag: str, train) -> int:
    """`python -m leader|follower` (training): parse, validate, run the role's train(cfg, log, state) guarded.

    train may put its channel in state["channel"]; abort_peers tells the peers; the channel and the log are closed
    whatever happens.
    """
    from vfl.obs.logs import RunLog, set_verbosity

    endpoint_key = endpoint_flag.lstrip("-")
    parser = party_arguments(command_name(role), endpoint_flag)
    parser.add_argument(
        "--check-link",
        action="store_true",
        help="after PSI, measure each follower's round trip and bandwidth over the authenticated channel, print "
        "what the link calls for (train.staleness, network.compression) and stop: nothing is trained (the leader "
        "and every follower start with it)"
        if role == "leader"
        else "take part in the leader's link check and exit 0 after it (the leader starts with --check-link too)",
    )
    args = parser.parse_intermixed_args(argv)
    set_verbosity(args.quiet, args.verbose)
    cfg = config_or_exit(args, endpoint_key)
    if isinstance(cfg, int):
        return cfg
    if cfg.role != role:
        return fail(f"{args.config} has role {cfg.role!r}; python -m {role} needs role: {role}", 2)
    from vfl.distributed.launch import LaunchError, rank_env

    try:
        ranks = rank_env()
    except LaunchError as e:
        return fail(str(e), 2)
    if not ranks.is_main:  # rank r > 0: its own log file, and a console for warnings and errors only
        set_verbosity(True, False)
    log = RunLog(os.path.join(cfg.output.dir, ranks.log_name(cfg.party)), cfg.party)
    state: dict = {"ranks": ranks, "check_link": getattr(args, "check_link", False)}

    auto = args.resume == "auto"
    if auto and ranks.distributed:
        return fail("--resume auto rejoins one process per party: run it with --ranks 1", 2)

    def checked_body(cfg: PartyConfig) -> None:
        from vfl.preflight import preflight
        from vfl.session.rejoin import REJOIN_ERRORS, rejoin_line, rejoin_step

        ready = preflight(cfg, log)  # data path, resume step, checkpoint size: before torch and before any peer
        party_keys(ready)
        log(f"{role} {cfg.party}: config, keys and data checked ({ready.data.path}); loading torch and the model")
        try:
            train(ready, log, state)
        except REJOIN_ERRORS as e:  # --resume auto: start again from a common step (vfl/session/rejoin.py)
            if not auto:
                raise
            state["rejoin"] = rejoin_step(e, str(ready.output.dir), ready.party, state.get("channel"))
            log(rejoin_line(e, state["rejoin"]))

    def run_once(cfg: PartyConfig) -> int:
        return run_party(cfg, log, lambda: checked_body(cfg), lambda reason: abort_peers(state, reason))

    try:
        if auto:
            from vfl.session.rejoin import rejoining

            return rejoining(cfg, log, state, run_once)
        return run_once(cfg)
    finally:
        close_command(state, log)
