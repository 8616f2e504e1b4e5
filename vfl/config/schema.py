"""Party configuration: one pydantic schema (defaults, types, domains) for YAML, CLI overrides and JSON Schema.

Every problem is reported at once, each quoting the key, the bad value and the allowed domain; an
unknown key suggests the nearest valid one. Keys never live in YAML: `network.secret_key_file`,
`network.follower_keys` (leader) and `network.leader_key_file` (follower) name CurveZMQ certificate
files (vfl/wire/curve_keys.py). `python -m vfl.config schema` prints the JSON Schema for editors.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from privacy.domains import DEFAULT_LABEL_DP_BUDGET, PRIOR_EPS_FRACTION, LabelEps
from privacy.field_types import (
    Choice,
    Flag,
    Number,
    Text,
    domain_error,
    field_error,
    yaml12_number,
)
from vfl.config.label_dp_rules import CLASS_LABEL_DP, REGRESSION_LABEL_DP, regression_label_dp_default
from vfl.config.model_sections import BottomConfig, ModelConfig, TopConfig
from vfl.config.report import apply_overrides, fill_empty_sections, off_switch, parse_override, problems
from vfl.config.role_rules import role_problems
from vfl.config.table_schema import SchemaConfig, load_schema_file
from vfl.config.yamlfile import read_yaml


def Staleness():
    """train.staleness: an integer in [0, MAX_STALENESS], or auto (the leader chooses K from the measured link)."""
    from typing import Annotated, Literal, Union

    from pydantic import BeforeValidator

    from vfl.wire.messages import MAX_STALENESS

    def check(value: Any, info) -> Any:
        if value == "auto":
            return value
        value = yaml12_number(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STALENESS:
            raise field_error(f"{info.field_name} must be an integer in [0, {MAX_STALENESS}] or 'auto', got {value!r}")
        return value

    return Annotated[
        Union[int, Literal["auto"]],
        BeforeValidator(check),
        Field(json_schema_extra={"minimum": 0, "maximum": MAX_STALENESS}),
    ]


PARTY_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
ENDPOINT_PATTERN = r"^tcp://[^:/\s]+:\d{1,5}$"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message lists every problem."""


class _Section(BaseModel):
    """A frozen mapping of known keys: unknown keys are errors, values are read-only attributes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PartyName = Text(PARTY_PATTERN, f"be a name matching {PARTY_PATTERN}")
Endpoint = Text(ENDPOINT_PATTERN, "look like tcp://HOST:PORT")
Path = Text()


class CompressionConfig(_Section):
    """Wire codecs per direction (vfl/wire/codecs.py, docs/wire.md); none = the float32 tensors, exactly. Every party
    the same (HELLO refuses a difference)."""

    embedding: Choice("none", "fp16", "bf16", "int8") = "none"  # the cuts a follower sends (training and EVAL)
    gradient: Choice("none", "fp16", "bf16", "int8", "topk") = "none"  # the cut gradients the leader sends
    bits: Number(2, 8, integer=True) = 8  # int8: levels per entry are 2^bits (packed), per-row min-max
    # topk: the share of each gradient row sent (k = max(1, ceil(fraction x cut_dim)) entries of largest magnitude);
    # what is dropped is added to the same sample's next gradient at the leader (error feedback)
    topk_fraction: Number(0.0, 0.5, lo_open=True) = 0.25


class NetworkConfig(_Section):
    bind: Optional[Endpoint] = None  # leader: "tcp://127.0.0.1:5560"
    connect: Optional[Endpoint] = None  # follower: the leader's endpoint
    followers: tuple[str, ...] = ()  # leader: expected follower party names (checked with the role)
    timeout_s: Number(0, 86400, lo_open=True) = 60.0
    # a lost connection inside a run is waited for this long (the same key back, resynchronised, what was in flight
    # sent again: vfl/wire/resync.py); 0: the first lost connection ends the run
    reconnect_s: Number(0, 86400) = 300.0
    secret_key_file: Optional[Path] = None  # this party's <party>.key_secret (python -m vfl.keys new)
    follower_keys: dict[str, Path] = Field(default_factory=dict)  # leader: follower name -> its public <name>.key
    leader_key_file: Optional[Path] = None  # follower: the leader's public key, pinned
    # follower with N ranks: the endpoint of each leader rank (default: connect's host, port + rank)
    rank_endpoints: tuple[Endpoint, ...] = ()
    compression: CompressionConfig = Field(default_factory=CompressionConfig)


warnings.filterwarnings("ignore", message='Field name "schema" in "DataConfig" shadows', category=UserWarning)


class DataConfig(_Section):
    path: Path  # this party's shard directory (OUT/<party> of `python -m vfl.data prepare`)
    dense: Optional[tuple[str, ...]] = None  # optional: must equal the shard's columns
    categorical: Optional[tuple[str, ...]] = None
    # refuse a peer declaring more ids for the PSI; unset: a leader allows max(16 x its ids, 2**20), a follower 2**27
    psi_max_peer_ids: Optional[Number(1, 2**27, integer=True)] = None
    # reuse the last agreed intersection when neither side's ids changed (cache in <path>/psi_cache; docs/psi.md)
    psi_reuse: Flag() = True
    # check the peer's batched DLEQ proofs in the PSI (vfl/align/psi/dleq.py): a follower the leader's doubles, a
    # leader its followers' replies; a chunk whose proof fails is refused (docs/psi.md: its cost, and why it is off)
    psi_verify: Flag() = False
    min_intersection: Number(1, 2**40, integer=True) = (
        100  # refuse to train when the ids' private set intersection is smaller
    )
    # this party's own table: id column, feature columns (kind, transform) and the leader's label (vfl/config/table_schema.py);
    # inline, or the path of a YAML file holding it. Used by `vfl-data prepare --config` and the launch scripts' --raw
    schema: Optional[SchemaConfig] = None

    @field_validator("schema", mode="before")
    @classmethod
    def _schema_file(cls, v):
        return load_schema_file(v) if isinstance(v, str) else v


class EarlyStoppingConfig(_Section):
    metric: Choice("auc", "logloss", "accuracy", "rmse", "mae", "r2") = (
        "auc"  # accuracy: multiclass only; rmse, mae, r2: regression only (unset there: rmse); on the validation
        # split (randomized labels under label DP, debiased)
    )
    patience: Number(1, 10_000, integer=True) = 3  # evaluations without a gain of more than min_delta
    min_delta: Number(0.0, 1.0) = 0.0
    # point: every evaluation not better than the best counts against the patience; interval: only one whose 95%
    # interval lies below the best (auc, accuracy, rmse; vfl/training/selection.py), so a small or randomized
    # validation split does not stop the run on noise
    rule: Choice("point", "interval") = "point"


class LRScheduleConfig(_Section):
    name: Choice("constant", "cosine", "linear") = "constant"  # linear: decay to 0 at the last step
    warmup_steps: Number(0, integer=True) = 0


class LinearOptimizerConfig(_Section):
    name: Choice("adagrad") = "adagrad"
    lr: Number(0.0, 10.0, lo_open=True) = 0.03  # its own rate (not train.lr); train.lr_schedule scales it too


class TrainConfig(_Section):
    epochs: Number(1, 10_000, integer=True) = 1
    batch_size: Number(1, 10_000_000, integer=True) = 16000
    eval_batch_size: Number(1, 10_000_000, integer=True) = 65536
    seed: Number(0, 2**63 - 1, integer=True) = 0
    log_every: Number(1, integer=True) = 100
    lr: Number(0.0, 10.0, lo_open=True) = 1e-3
    optimizer: Choice("adam", "sgd", "adagrad") = "adam"  # adam: lazy Adam on embeddings
    weight_decay: Number(0.0, 1.0) = 0.0
    checkpoint_every: Number(0, integer=True) = 0  # steps; 0 = only at the end
    device: Choice("cpu", "cuda", "auto") = "cpu"
    threads: Number(0, 1024, integer=True) = 0  # torch intra-op threads; 0 = cores / parties on this host
    resume_from: Optional[Path] = None  # this party's checkpoint (.pt) to continue from
    eval_every_steps: Number(0, integer=True) = 0  # evaluate every N global steps; 0 = at the end of every epoch
    early_stopping: Optional[EarlyStoppingConfig] = Field(
        None, json_schema_extra=off_switch
    )  # leader: select the best step on valid, restore it
    lr_schedule: LRScheduleConfig = Field(default_factory=LRScheduleConfig)
    # leader: one sigmoid output | K softmax outputs (K from the shard) | one real value (MSE or Huber)
    task: Choice("binary", "multiclass", "regression") = "binary"
    loss: Choice("mse", "huber") = "mse"  # leader, regression: on the standardized label (Huber's delta = 1 sd)
    precision: Choice("fp32", "bf16") = (
        "fp32"  # bf16: autocast forward passes, fp32 master weights (vfl/training/precision.py)
    )
    microbatches: Number(1, 1_000_000, integer=True) = (
        1  # M micro-batches per batch, pipelined between parties; every party the same
    )
    # K > 0: each party runs the bottoms of up to K batches beyond the one whose gradient it awaits and applies every
    # gradient on arrival, to weights at most K updates newer (bounded-staleness pipelining across batches,
    # vfl/training/staleness.py); 0 = the synchronous step; auto: the leader chooses K from each link's measured
    # round trip, its measured step time and the run's length (vfl/training/staleness_auto.py; 0 on loopback).
    # Every party the same; needs microbatches 1 and one rank
    staleness: Staleness() = 0
    # what a bottom does with a gradient K updates late (vfl/training/staleness_correction.py): none (delayed SGD),
    # delay_compensation (DC-ASGD), staleness_lr (lr / tau), local_updates (CELU-VFL's cached cut/gradient pairs).
    # Each party applies its own to its own bottom; nothing runs under staleness 0
    staleness_correction: Choice("none", "delay_compensation", "staleness_lr", "local_updates") = "none"
    # leader, under staleness K > 0: its own bottom synchronous (fresh: its cut computed and its gradient applied at
    # the batch's own step; measured to cost a third of stale's AUC, docs/deploy-wan.md) or on the stale schedule
    # (stale: its cut of a batch from weights as old as the followers')
    staleness_leader_bottom: Choice("stale", "fresh") = "fresh"
    # > 0: evaluate, select and save an exponential moving average of the weights (avg <- d avg + (1 - d) param
    # after every step, vfl/training/weight_average.py); 0 = off. Set the same value on every party.
    ema_decay: Number(0.0, 1.0, hi_open=True) = 0.0
    # Adam's epsilon on the sparse embedding tables (lazy Adam; optimizer adam only). Lazy Adam moves a row a batch
    # touched by about lr whatever its gradient, so a rarely seen id takes full-size steps on one or two rows'
    # evidence; a larger eps (1e-4) makes such a row's step proportional to its gradient (docs/models.md)
    embedding_adam_eps: Number(1e-12, 1.0) = 1e-8
    # the bottom's linear part (wide_deep's wide part, deepfm's first order: one weight per id and the numbers' linear
    # layer) trained by its own optimizer, as Wide&Deep trains its wide part apart from the deep (docs/models.md);
    # unset: the linear part trains with the rest
    linear_optimizer: Optional[LinearOptimizerConfig] = Field(None, json_schema_extra=off_switch)
    # a table run (data.schema) of fewer than ~50 optimizer steps is refused with the numbers; true: train it anyway
    # (vfl/training/table_defaults.py, which also sizes batch_size, epochs and early stopping where they are unset)
    allow_short_run: Flag() = False

    @model_validator(mode="after")
    def _task_default_metric(self) -> "TrainConfig":
        es = self.early_stopping
        if self.task == "regression" and es is not None and "metric" not in es.model_fields_set:
            object.__setattr__(self, "early_stopping", es.model_copy(update={"metric": "rmse"}))
        return self


class LabelDPConfig(_Section):
    eps: LabelEps() = 1.0  # required in YAML; in [0.001, 50] (privacy/domains.py), or .inf (inf) = no noise
    # rr, rr_prior: class labels (binary, multiclass); laplace, rr_on_bins, unbiased: train.task regression
    mechanism: Choice(*CLASS_LABEL_DP, *REGRESSION_LABEL_DP) = "rr"
    # regression: the label range [lo, hi] in its units (stated, never read from the labels; unset: data.schema's
    # label clip); bins: grid points over it (unbiased: at most 48); prior of rr_on_bins and unbiased:
    # dp_histogram (a DP histogram of the labels, eps x prior_eps_fraction of the eps), uniform, or a value,weight CSV
    clip: Optional[tuple[Number(), Number()]] = None
    bins: Number(2, 256, integer=True) = 32
    prior: Text() = "dp_histogram"
    prior_eps_fraction: Number(0.0, 1.0, lo_open=True, hi_open=True) = PRIOR_EPS_FRACTION
    # debias: the loss corrects for the noise. Default (unset): on for rr (forward correction beat plain RR at
    # eps <= 2 and tied above; README, Utility), off for rr_prior (its labels are not a fixed-rate channel)
    debias: Optional[Flag()] = None
    correction: Choice("forward", "posterior") = "forward"  # with debias: Patrini et al. 2017 | ALIBI-style soft labels
    prior_fraction: Number(0.0, 1.0, lo_open=True, hi_open=True) = 0.5  # rr_prior: share of ids training the prior
    prior_epochs: Number(1, 1000, integer=True) = 1
    # the most eps any sample id of the labelled dataset may have spent, over every release of it and of overlapping
    # datasets (the ledger's dataset_total_eps); a new release beyond it is refused before any label is drawn. 8: the
    # top of the range label-DP papers report (Ghazi et al. 2021 go to 8), where binary RR flips 0.03% of labels;
    # that is 8 runs at eps 1 or 4 at eps 2, while re-runs of one release cost nothing. .inf = no cap (say so knowingly)
    budget: Number(0.0, lo_open=True) = DEFAULT_LABEL_DP_BUDGET
    store_dir: Optional[Path] = (
        None  # per-dataset key + ledger; None: $VFL_LABEL_DP_STORE or ~/.local/share/vfl/label_dp
    )
    key_file: Optional[Path] = None  # the leader's secret PRF key; None: <store_dir>/<dataset>/key

    @model_validator(mode="after")
    def _mechanism_default_debias(self) -> "LabelDPConfig":
        if self.debias is None:
            object.__setattr__(self, "debias", self.mechanism == "rr")
        return self


class DistributedConfig(_Section):
    """N ranks per party under torchrun (WORLD_SIZE > 1); ignored by one rank."""

    backend: Choice("auto", "gloo", "nccl") = (
        "auto"  # auto: nccl on cuda, gloo on cpu (sparse embedding gradients need gloo)
    )
    timeout_s: Number(1, 86400) = (
        600.0  # a collective within the party fails after this (set it above rank 0's PSI time)
    )


class EmbeddingDPConfig(_Section):
    """A follower's cut embeddings, each row clipped to L2 <= clip plus Gaussian noise from its own OS entropy before
    it leaves (privacy/embedding_dp.py; docs/label-dp.md, the follower's side)."""

    eps: Number(0.0, 1000.0, lo_open=True) = 1.0  # required in YAML: (eps, delta) per row over all its sends
    delta: Number(0.0, 0.1, lo_open=True, hi_open=False) = 1e-5
    clip: Number(0.0, lo_open=True) = 1.0  # L2 norm bound of a row's cut (the signal the noise is measured against)
    # training: the most releases of any one row's cut for one model (its run and every resume of it), counted by the
    # follower's send ledger across processes; unset: the sends the leader's schedule makes (WELCOME: epochs,
    # evaluations, the re-test after a restore). A schedule past it is refused at the handshake
    releases: Optional[Number(1, 1000000, integer=True)] = None
    # prediction and serving: the most distinct releases of an id's cut by one trained model, across every process
    # (a repeat of a released value is the same bytes and free; a changed row's value is a new release)
    scoring_releases: Number(1, 1000000, integer=True) = 1
    ledger_dir: Optional[Path] = None  # the send ledger; unset: <dir of network.secret_key_file>/<party>.embedding_dp


class PrivacyConfig(_Section):
    label_dp: Optional[LabelDPConfig] = Field(None, json_schema_extra=off_switch)
    embedding_dp: Optional[EmbeddingDPConfig] = Field(None, json_schema_extra=off_switch)  # follower only


class OutputConfig(_Section):
    dir: Path = "runs/local"


class DebugConfig(_Section):
    record_gradients: Optional[Path] = None  # follower: write every received gradient here (.npz)
    record_cuts: Optional[Path] = None  # follower: write every cut it sends (the leader's view of it) here (.npz)


class PartyConfig(_Section):
    role: Choice("leader", "follower")
    party: PartyName
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    data: DataConfig
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    debug: DebugConfig = Field(default_factory=DebugConfig)

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"


def _secret_hint(key: str) -> str:
    return (
        (
            " (secrets never go in YAML: name CurveZMQ key files with network.secret_key_file and "
            "network.follower_keys / network.leader_key_file, or pass --keys DIR)"
        )
        if "secret" in key
        else ""
    )


def parse_config(doc: Any, source: str = "config") -> PartyConfig:
    """Validate a parsed YAML document; raise ConfigError listing every problem."""
    if not doc:
        raise ConfigError(f"{source}: empty configuration")
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: 1 problem(s):\n  - top level: expected a mapping, got {doc!r}")
    doc = fill_empty_sections(PartyConfig, copy.deepcopy(doc))
    regression_label_dp_default(doc)
    errors = role_problems(
        doc,
        PARTY_PATTERN,
        TrainConfig.model_fields["batch_size"].default,
        LabelDPConfig.model_fields["budget"].default,
    )
    if doc.get("role") == "leader" and isinstance(doc.get("model", {}), dict):
        doc.setdefault("model", {}).setdefault("top", {})
    if isinstance(doc.get("output", {}), dict) and "dir" not in doc.get("output", {}):
        party = doc.get("party")
        doc.setdefault("output", {})["dir"] = f"runs/{party if isinstance(party, str) else 'party'}"
    doc.setdefault("data", {})
    cfg = None
    try:
        cfg = PartyConfig.model_validate(doc)
    except ValidationError as e:
        errors = problems(PartyConfig, e, _secret_hint) + errors
    if errors:
        raise ConfigError(f"{source}: {len(errors)} problem(s):\n  - " + "\n  - ".join(errors))
    if not cfg.is_leader:  # a follower's endpoint fields keep only what it uses
        cfg = cfg.model_copy(update={"network": cfg.network.model_copy(update={"bind": None})})
    return cfg


def load_config(path: str, overrides: dict[str, Any] | None = None, keys_dir: str | None = None) -> PartyConfig:
    """Read and validate a party YAML; `overrides` maps dotted keys to values (from the CLI).

    keys_dir (--keys DIR) names every key file after the layout of `python -m vfl.keys new`:
    DIR/<party>.key_secret, and DIR/<follower>.key (leader) or the leader's public key (follower: DIR/leader.key,
    or the leader's by party name: vfl/config/keys_dir.py).
    """
    doc = read_yaml(path, ConfigError, "config file")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: expected a YAML mapping of sections (role, party, network, ...), got {type(doc).__name__}"
        )
    if keys_dir:
        from vfl.config.keys_dir import KeysDirError, keys_overrides

        try:
            overrides = {**keys_overrides(doc, keys_dir, overrides), **(overrides or {})}
        except KeysDirError as e:
            raise ConfigError(str(e)) from None
    return parse_config(apply_overrides(doc, overrides or {}), path)


def dotted_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["train.lr=1e-4", ...]` -> {"train.lr": 1e-4, ...}; ConfigError for a malformed pair."""
    out = {}
    for text in pairs:
        try:
            key, value = parse_override(text)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        out[key] = value
    for key in out:  # `privacy.label_dp=false privacy.label_dp.eps=3`: which one is meant depends on nothing stated
        inner = next((k for k in out if k.startswith(key + ".")), None)
        if inner is not None:
            raise ConfigError(
                f"overrides {key}={out[key]!r} and {inner}={out[inner]!r} conflict: the first sets the whole section; "
                "give one of them"
            )
    return out


def json_schema() -> dict:
    """The JSON Schema of a party YAML (for editors: yaml-language-server, VS Code, PyCharm)."""
    schema = PartyConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "vfl party configuration"
    return schema


__all__ = [
    "ConfigError",
    "PartyConfig",
    "NetworkConfig",
    "CompressionConfig",
    "DataConfig",
    "BottomConfig",
    "TopConfig",
    "ModelConfig",
    "EarlyStoppingConfig",
    "LRScheduleConfig",
    "TrainConfig",
    "LabelDPConfig",
    "PrivacyConfig",
    "DistributedConfig",
    "OutputConfig",
    "DebugConfig",
    "parse_config",
    "load_config",
    "dotted_overrides",
    "json_schema",
    "read_yaml",
    "domain_error",
]
