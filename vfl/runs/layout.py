"""What `--run RUN` finds for predict, export and serve: the run's shard, keys and checkpoints.

When data.path is wrong, the errors name the real fix.

A local run (`scripts/run_table_local.sh --out RUN`, `scripts/run_vfl_train_local.sh --out RUN`) writes
RUN/shards/<party> (each party's prepared shard), RUN/keys (the key pairs), RUN/checkpoints/<party>_final.pt (the
model training selected) and RUN/configs/<party>.yaml (the YAMLs it trained with; table runs). With `--run RUN` a
party command uses the first two unless `--data` / `--keys` (or the YAML's network.secret_key_file) say otherwise,
and RUN as output.dir (its checkpoints); nothing else of the YAML changes.
"""

from __future__ import annotations

import os

from vfl.data.errors import DataError


def _yaml_doc(path: str) -> dict:
    from vfl.config.schema import ConfigError
    from vfl.config.yamlfile import read_yaml

    doc = read_yaml(path, ConfigError, "config file")
    return doc if isinstance(doc, dict) else {}


def apply_run(args) -> list[str]:
    """Fill args.data and args.keys from args.run (when given and the run holds them); returns what was filled, as
    `--flag VALUE` notes for the log."""
    if not getattr(args, "run", None):
        return []
    doc = _yaml_doc(args.config)
    party, net = doc.get("party"), doc.get("network")
    notes = []
    shard = os.path.join(args.run, "shards", str(party))
    if getattr(args, "data", None) is None and isinstance(party, str) and os.path.isdir(shard):
        args.data = shard
        notes.append(f"--data {shard}")
    keys = os.path.join(args.run, "keys")
    own_keys = isinstance(net, dict) and net.get("secret_key_file")
    if getattr(args, "keys", None) is None and not own_keys and os.path.isdir(keys):
        args.keys = keys
        notes.append(f"--keys {keys}")
    return notes


def check_shard_path(cfg, command: str) -> None:
    """DataError naming the fix when data.path is not a directory: the run's own shard (output.dir/shards/<party>)
    where it exists, else the flags that name one."""
    path = str(cfg.data.path)
    if os.path.isdir(path):
        return
    raise DataError(f"data.path {path!r} does not exist or is not a directory: {shard_hint(cfg, command)}")


def shard_hint(cfg, command: str) -> str:
    """How to give `command` this party's shard: `--data RUN/shards/<party>` when the run directory holds it."""
    run_shard = os.path.join(str(cfg.output.dir), "shards", cfg.party)
    if os.path.isdir(run_shard) and os.path.abspath(run_shard) != os.path.abspath(str(cfg.data.path)):
        return f"this run's shard of {cfg.party} is {run_shard}: pass --data {run_shard} (or --run {cfg.output.dir})"
    return (
        f"pass {command} --data DIR/{cfg.party} (the shard `python -m vfl.data prepare --config ... --out DIR` wrote), "
        f"or --run RUN of a local run that holds RUN/shards/{cfg.party}"
    )


def default_checkpoint(cfg, run_dir: str | None) -> str:
    """The checkpoint prediction reads by default: RUN/checkpoints/<party>_final.pt (the model training selected)."""
    return os.path.join(run_dir or cfg.output.dir, "checkpoints", f"{cfg.party}_final.pt")
