"""Party configuration: YAML -> frozen dataclasses, with every error reported at once.

Each error quotes the key, the bad value and the allowed domain; an unknown key suggests the
nearest valid one. Keys never live in YAML: `network.secret_key_file`, `network.follower_keys`
(leader) and `network.leader_key_file` (follower) name CurveZMQ certificate files (vfl/wire/keys.py).
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from vfl.yamlfile import read_yaml


class ConfigError(ValueError):
    """A configuration that cannot be used; the message lists every problem."""


@dataclass(frozen=True)
class NetworkConfig:
    bind: str | None = None  # leader: "tcp://127.0.0.1:5560"
    connect: str | None = None  # follower: the leader's endpoint
    followers: tuple[str, ...] = ()  # leader: expected follower party names
    timeout_s: float = 60.0
    secret_key_file: str | None = None  # this party's <party>.key_secret (python -m vfl.keys new)
    follower_keys: dict[str, str] = field(default_factory=dict)  # leader: follower name -> its public <name>.key
    leader_key_file: str | None = None  # follower: the leader's public key, pinned


@dataclass(frozen=True)
class DataConfig:
    path: str = ""  # this party's shard directory (OUT/<party> of `python -m vfl.data prepare`)
    dense: tuple[str, ...] | None = None  # optional: must equal the shard's columns
    categorical: tuple[str, ...] | None = None
    min_intersection: int = 100  # refuse to train when the private set intersection of the ids is smaller


@dataclass(frozen=True)
class BottomConfig:
    name: str = "wide_deep"
    embedding_dim: int = 80
    hidden: tuple[int, ...] = (1024, 512, 256, 128)
    cut_dim: int = 2  # 1 wide value + (cut_dim - 1) deep values
    dropout: float = 0.0


@dataclass(frozen=True)
class TopConfig:
    name: str = "linear"  # linear | mlp
    hidden: tuple[int, ...] = ()


@dataclass(frozen=True)
class ModelConfig:
    bottom: BottomConfig = field(default_factory=BottomConfig)
    top: TopConfig | None = None  # leader only


@dataclass(frozen=True)
class EarlyStoppingConfig:
    metric: str = "auc"  # auc | logloss, on the validation split (randomized labels under label DP, debiased)
    patience: int = 3  # evaluations without a gain of more than min_delta before training stops
    min_delta: float = 0.0


@dataclass(frozen=True)
class LRScheduleConfig:
    name: str = "constant"  # constant | cosine | linear (decay to 0 at the last step)
    warmup_steps: int = 0


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 1
    batch_size: int = 16000
    eval_batch_size: int = 65536
    seed: int = 0
    log_every: int = 100
    lr: float = 1e-3
    optimizer: str = "adam"  # adam (lazy Adam on embeddings) | sgd | adagrad
    weight_decay: float = 0.0
    checkpoint_every: int = 0  # steps; 0 = only at the end
    device: str = "cpu"  # cpu | cuda | auto
    threads: int = 0  # torch intra-op threads; 0 = cores / parties on this host
    resume_from: str | None = None  # this party's checkpoint (.pt) to continue from
    eval_every_steps: int = 0  # evaluate valid (and test) every N global steps; 0 = at the end of every epoch
    early_stopping: EarlyStoppingConfig | None = None  # leader: select the best step on valid, restore it
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)


@dataclass(frozen=True)
class LabelDPConfig:
    eps: float = 1.0
    mechanism: str = "rr"  # rr | rr_prior
    debias: bool = False
    correction: str = "forward"  # with debias: forward (Patrini et al. 2017) | posterior (ALIBI-style soft labels)
    prior_fraction: float = 0.5  # rr_prior: share of training ids that train the stage-1 prior model
    prior_epochs: int = 1
    store_dir: str | None = None  # per-dataset key + ledger; None: $VFL_LABEL_DP_STORE or ~/.local/share/vfl/label_dp
    key_file: str | None = None  # the leader's secret PRF key; None: <store_dir>/<dataset>/key


@dataclass(frozen=True)
class PrivacyConfig:
    label_dp: LabelDPConfig | None = None


@dataclass(frozen=True)
class OutputConfig:
    dir: str = "runs/local"


@dataclass(frozen=True)
class DebugConfig:
    record_gradients: str | None = None  # follower: write every received gradient here (.npz)


@dataclass(frozen=True)
class PartyConfig:
    role: str
    party: str
    network: NetworkConfig
    data: DataConfig
    model: ModelConfig
    train: TrainConfig
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"


_ENDPOINT = re.compile(r"^tcp://[^:/\s]+:\d{1,5}$")
_PARTY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_SECTION_KEYS = {
    "": ("role", "party", "network", "data", "model", "train", "privacy", "output", "debug"),
    "network": ("bind", "connect", "followers", "timeout_s", "secret_key_file", "follower_keys", "leader_key_file"),
    "data": ("path", "dense", "categorical", "min_intersection"),
    "model": ("bottom", "top"),
    "model.bottom": ("name", "embedding_dim", "hidden", "cut_dim", "dropout"),
    "model.top": ("name", "hidden"),
    "train": ("epochs", "batch_size", "eval_batch_size", "seed", "log_every", "lr", "optimizer", "weight_decay",
              "checkpoint_every", "device", "threads", "resume_from", "eval_every_steps", "early_stopping",
              "lr_schedule"),
    "train.early_stopping": ("metric", "patience", "min_delta"),
    "train.lr_schedule": ("name", "warmup_steps"),
    "privacy": ("label_dp",),
    "privacy.label_dp": ("eps", "mechanism", "debias", "correction", "prior_fraction", "prior_epochs", "store_dir",
                         "key_file"),
    "output": ("dir",),
    "debug": ("record_gradients",),
}


class _Checker:
    """Collects every error while reading a nested mapping."""

    def __init__(self, source: str):
        self.source = source
        self.errors: list[str] = []

    def section(self, doc: Any, path: str) -> dict:
        if doc is None:
            return {}
        if not isinstance(doc, dict):
            self.errors.append(f"{path or 'top level'}: expected a mapping, got {doc!r}")
            return {}
        allowed = _SECTION_KEYS[path]
        for key in doc:
            if key not in allowed:
                full = f"{path}.{key}" if path else str(key)
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean {(path + '.' if path else '') + near[0]!r}?" if near else ""
                extra = (" (secrets never go in YAML: name CurveZMQ key files with network.secret_key_file and "
                         "network.follower_keys / network.leader_key_file, or pass --keys DIR)") if "secret" in str(key) else ""
                self.errors.append(f"unknown key {full!r}{hint}{extra}; allowed in {path or 'top level'}: {', '.join(allowed)}")
        return doc

    def number(self, doc, path, key, default, *, integer=False, lo=None, hi=None, lo_open=False, hi_open=False):
        value = doc.get(key, default)
        name = f"{path}.{key}"
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            self.errors.append(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
            return default
        if isinstance(value, float) and math.isnan(value):
            self.errors.append(f"{name} must not be NaN")
            return default
        bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
        bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
        if bad_lo or bad_hi:
            domain = f"{'(' if lo_open else '['}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{')' if hi_open or hi is None else ']'}"
            self.errors.append(f"{name} must be in {domain}, got {name.split('.')[-1]}={value!r}")
            return default
        return value

    def choice(self, doc, path, key, default, options):
        value = doc.get(key, default)
        if value not in options:
            near = difflib.get_close_matches(str(value), options, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            self.errors.append(f"{path}.{key} must be one of {list(options)}, got {value!r}{hint}")
            return default
        return value

    def string(self, doc, path, key, default=None, required=False):
        value = doc.get(key, default)
        if value is None:
            if required:
                self.errors.append(f"{path}.{key} is required")
            return default
        if not isinstance(value, str) or not value:
            self.errors.append(f"{path}.{key} must be a non-empty string, got {value!r}")
            return default
        return value

    def boolean(self, doc, path, key, default):
        value = doc.get(key, default)
        if not isinstance(value, bool):
            self.errors.append(f"{path}.{key} must be true or false, got {value!r}")
            return default
        return value

    def int_list(self, doc, path, key, default, lo=1):
        value = doc.get(key, list(default))
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < lo for v in value):
            self.errors.append(f"{path}.{key} must be a list of integers >= {lo}, got {value!r}")
            return tuple(default)
        return tuple(value)

    def str_list(self, doc, path, key, default):
        value = doc.get(key, default)
        if value is None:
            return None
        if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
            self.errors.append(f"{path}.{key} must be a list of names, got {value!r}")
            return default
        return tuple(value)


def _follower_keys(c: _Checker, n: dict, followers: tuple[str, ...]) -> dict[str, str]:
    """network.follower_keys: {follower name: public key file}, naming only configured followers."""
    value = n.get("follower_keys")
    if value is None:
        return {}
    if not isinstance(value, dict) or any(not isinstance(k, str) or not isinstance(v, str) or not v for k, v in value.items()):
        c.errors.append(f"network.follower_keys must map follower names to public key files, got {value!r}")
        return {}
    stray = [k for k in value if followers and k not in followers]
    if stray:
        c.errors.append(f"network.follower_keys names {stray}, which are not in network.followers {list(followers)}")
    return dict(value)


def parse_config(doc: Any, source: str = "config") -> PartyConfig:
    """Validate a parsed YAML document; raise ConfigError listing every problem."""
    c = _Checker(source)
    top = c.section(doc, "")
    if not top and not c.errors:
        raise ConfigError(f"{source}: empty configuration")
    role = c.choice(top, "top level", "role", None, ["leader", "follower"]) if "role" in top else None
    if role is None and "role" not in top:
        c.errors.append("role is required: leader | follower")
    party = top.get("party")
    if not isinstance(party, str) or not _PARTY.match(party):
        c.errors.append(f"party must be a name matching {_PARTY.pattern}, got {party!r}")
    is_leader = role == "leader"

    n = c.section(top.get("network"), "network")
    endpoint_key = "bind" if is_leader else "connect"
    endpoint = c.string(n, "network", endpoint_key, required=role is not None)
    if endpoint is not None and not _ENDPOINT.match(endpoint):
        c.errors.append(f"network.{endpoint_key} must look like tcp://HOST:PORT, got {endpoint!r}")
    elif endpoint is not None and not 1 <= int(endpoint.rsplit(":", 1)[1]) <= 65535:
        c.errors.append(f"network.{endpoint_key} port must be in [1, 65535], got {endpoint!r}")
    other = "connect" if is_leader else "bind"
    if role is not None and other in n:
        c.errors.append(f"network.{other} is not used by a {role} (it uses network.{endpoint_key})")
    followers = ()
    if is_leader:
        fl = n.get("followers")
        if not isinstance(fl, list) or not fl or any(not isinstance(f, str) or not _PARTY.match(f) for f in fl):
            c.errors.append(f"network.followers must be a non-empty list of party names, got {fl!r}")
        elif len(set(fl)) != len(fl) or party in fl:
            c.errors.append(f"network.followers must be distinct names other than the leader's, got {fl!r}")
        else:
            followers = tuple(fl)
    elif "followers" in n:
        c.errors.append("network.followers is only used by the leader")
    network = NetworkConfig(
        bind=endpoint if is_leader else None,
        connect=None if is_leader else endpoint,
        followers=followers,
        timeout_s=c.number(n, "network", "timeout_s", 60.0, lo=0, lo_open=True, hi=86400),
        secret_key_file=c.string(n, "network", "secret_key_file"),
        follower_keys=_follower_keys(c, n, followers) if is_leader else {},
        leader_key_file=c.string(n, "network", "leader_key_file"),
    )
    if role is not None and ("leader_key_file" if is_leader else "follower_keys") in n:
        c.errors.append("network.leader_key_file is only used by a follower" if is_leader
                        else "network.follower_keys is only used by the leader")

    d = c.section(top.get("data"), "data")
    data = DataConfig(path=c.string(d, "data", "path", "", required=True) or "",
                      dense=c.str_list(d, "data", "dense", None), categorical=c.str_list(d, "data", "categorical", None),
                      min_intersection=c.number(d, "data", "min_intersection", 100, integer=True, lo=1, hi=2**40))

    m = c.section(top.get("model"), "model")
    b = c.section(m.get("bottom"), "model.bottom")
    bottom = BottomConfig(
        name=c.choice(b, "model.bottom", "name", "wide_deep", ["wide_deep"]),
        embedding_dim=c.number(b, "model.bottom", "embedding_dim", 80, integer=True, lo=1, hi=4096),
        hidden=c.int_list(b, "model.bottom", "hidden", (1024, 512, 256, 128)),
        cut_dim=c.number(b, "model.bottom", "cut_dim", 2, integer=True, lo=2, hi=4096),
        dropout=c.number(b, "model.bottom", "dropout", 0.0, lo=0.0, hi=1.0, hi_open=True),
    )
    top_cfg = None
    if is_leader:
        t = c.section(m.get("top", {}), "model.top")
        top_cfg = TopConfig(name=c.choice(t, "model.top", "name", "linear", ["linear", "mlp"]),
                            hidden=c.int_list(t, "model.top", "hidden", ()))
        if top_cfg.name == "mlp" and not top_cfg.hidden:
            c.errors.append("model.top.hidden must list at least one layer size when model.top.name is mlp")
    elif "top" in m:
        c.errors.append("model.top is only used by the leader (followers hold bottom models)")
    model = ModelConfig(bottom=bottom, top=top_cfg)

    tr = c.section(top.get("train"), "train")
    train = TrainConfig(
        epochs=c.number(tr, "train", "epochs", 1, integer=True, lo=1, hi=10_000),
        batch_size=c.number(tr, "train", "batch_size", 16000, integer=True, lo=1, hi=10_000_000),
        eval_batch_size=c.number(tr, "train", "eval_batch_size", 65536, integer=True, lo=1, hi=10_000_000),
        seed=c.number(tr, "train", "seed", 0, integer=True, lo=0, hi=2**63 - 1),
        log_every=c.number(tr, "train", "log_every", 100, integer=True, lo=1),
        lr=c.number(tr, "train", "lr", 1e-3, lo=0.0, lo_open=True, hi=10.0),
        optimizer=c.choice(tr, "train", "optimizer", "adam", ["adam", "sgd", "adagrad"]),
        weight_decay=c.number(tr, "train", "weight_decay", 0.0, lo=0.0, hi=1.0),
        checkpoint_every=c.number(tr, "train", "checkpoint_every", 0, integer=True, lo=0),
        device=c.choice(tr, "train", "device", "cpu", ["cpu", "cuda", "auto"]),
        threads=c.number(tr, "train", "threads", 0, integer=True, lo=0, hi=1024),
        resume_from=c.string(tr, "train", "resume_from"),
        eval_every_steps=c.number(tr, "train", "eval_every_steps", 0, integer=True, lo=0),
        early_stopping=None,
        lr_schedule=LRScheduleConfig(),
    )
    if "early_stopping" in tr:
        if not is_leader:
            c.errors.append("train.early_stopping is set on the leader only (it holds the validation labels)")
        es = c.section(tr.get("early_stopping"), "train.early_stopping")
        train = replace(train, early_stopping=EarlyStoppingConfig(
            metric=c.choice(es, "train.early_stopping", "metric", "auc", ["auc", "logloss"]),
            patience=c.number(es, "train.early_stopping", "patience", 3, integer=True, lo=1, hi=10_000),
            min_delta=float(c.number(es, "train.early_stopping", "min_delta", 0.0, lo=0.0, hi=1.0))))
    if "lr_schedule" in tr:
        ls = c.section(tr.get("lr_schedule"), "train.lr_schedule")
        train = replace(train, lr_schedule=LRScheduleConfig(
            name=c.choice(ls, "train.lr_schedule", "name", "constant", ["constant", "cosine", "linear"]),
            warmup_steps=c.number(ls, "train.lr_schedule", "warmup_steps", 0, integer=True, lo=0)))

    p = c.section(top.get("privacy"), "privacy")
    label_dp = None
    if "label_dp" in p:
        if not is_leader:
            c.errors.append("privacy.label_dp is set on the leader only (it holds the labels)")
        ld = c.section(p.get("label_dp"), "privacy.label_dp")
        if "eps" not in ld:
            c.errors.append("privacy.label_dp.eps is required (a number >= 0, or .inf for no noise)")
        label_dp = LabelDPConfig(
            eps=float(c.number(ld, "privacy.label_dp", "eps", 1.0, lo=0.0)),
            mechanism=c.choice(ld, "privacy.label_dp", "mechanism", "rr", ["rr", "rr_prior"]),
            debias=c.boolean(ld, "privacy.label_dp", "debias", False),
            correction=c.choice(ld, "privacy.label_dp", "correction", "forward", ["forward", "posterior"]),
            prior_fraction=c.number(ld, "privacy.label_dp", "prior_fraction", 0.5, lo=0.0, hi=1.0, lo_open=True, hi_open=True),
            prior_epochs=c.number(ld, "privacy.label_dp", "prior_epochs", 1, integer=True, lo=1, hi=1000),
            store_dir=c.string(ld, "privacy.label_dp", "store_dir"),
            key_file=c.string(ld, "privacy.label_dp", "key_file"),
        )
        if label_dp.debias and label_dp.mechanism != "rr":
            c.errors.append("privacy.label_dp.debias applies to mechanism rr only")
    privacy = PrivacyConfig(label_dp=label_dp)

    o = c.section(top.get("output"), "output")
    output = OutputConfig(dir=c.string(o, "output", "dir", f"runs/{party if isinstance(party, str) else 'party'}"))
    dbg = c.section(top.get("debug"), "debug")
    debug = DebugConfig(record_gradients=c.string(dbg, "debug", "record_gradients"))
    if debug.record_gradients and is_leader:
        c.errors.append("debug.record_gradients is a follower option (what the follower receives)")

    if c.errors:
        raise ConfigError(f"{source}: {len(c.errors)} problem(s):\n  - " + "\n  - ".join(c.errors))
    return PartyConfig(role=role, party=party, network=network, data=data, model=model, train=train,
                       privacy=privacy, output=output, debug=debug)


def load_config(path: str, overrides: dict[str, Any] | None = None, keys_dir: str | None = None) -> PartyConfig:
    """Read and validate a party YAML; `overrides` maps dotted keys to values (from the CLI).

    keys_dir (--keys DIR) names every key file after the layout of `python -m vfl.keys new`:
    DIR/<party>.key_secret, and DIR/<follower>.key (leader) or DIR/leader.key (follower).
    """
    doc = read_yaml(path, ConfigError, "config file")
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of sections (role, party, network, ...), got {type(doc).__name__}")
    if keys_dir:
        overrides = {**_keys_overrides(doc, keys_dir), **(overrides or {})}
    for dotted, value in (overrides or {}).items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {} if child is None else child
            if not isinstance(child, dict):
                break  # the section itself is malformed; validation reports it
            node = child
        else:
            node[leaf] = value
    return parse_config(doc, path)


def _keys_overrides(doc: dict, keys_dir: str) -> dict[str, Any]:
    party, net = doc.get("party"), doc.get("network")
    followers = net.get("followers") if isinstance(net, dict) else None
    out: dict[str, Any] = {"network.secret_key_file": os.path.join(keys_dir, f"{party}.key_secret")}
    if doc.get("role") == "leader":
        names = followers if isinstance(followers, list) else []
        out["network.follower_keys"] = {f: os.path.join(keys_dir, f"{f}.key") for f in names if isinstance(f, str)}
    else:
        out["network.leader_key_file"] = os.path.join(keys_dir, "leader.key")
    return out
