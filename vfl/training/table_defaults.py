"""Defaults that fit the table: a table party's model and schedule, where its YAML leaves them unset, sized from its rows.

The schema's defaults (batch 16000, 1 epoch, hidden [1024, 512, 256, 128], embedding 80) are Criteo's; on a 48k-row
table they trained 3 steps to a test AUC below 0.5. A party whose config declares `data.schema` (its own table) gets,
for each of these keys that neither its YAML nor the command line set (pydantic's `model_fields_set`; an explicit
value always wins):

| key | sized value |
|---|---|
| train.batch_size | ~1% of the intersection's training rows, within [64, 4096] (and at least train.microbatches) |
| train.epochs | enough for >= 300 optimizer steps; RECIPE_STEPS (1200) with the tuned recipe |
| train.lr (with the tuned recipe, optimizer adam) | recipe_lr(batch): RECIPE_LR (1e-3) x sqrt(batch / LR_REFERENCE_BATCH (256)), within [1e-3, 4e-3] |
| train.early_stopping | on: the validation metric of the task (auc, rmse), patience RECIPE_PATIENCE (leader) |
| model.bottom (no key set, under 1M rows) | the tuned recipe, TUNED_BOTTOM: wide_deep, embedding 16, hidden [256, 128], cut 16 |
| model.top (leader, no key set, with the tuned bottom) | TUNED_TOP: mlp, hidden [128] |
| model.bottom.embedding_dim, hidden (a bottom with some key set, under 1M rows) | SMALL_MODEL: 16, [256, 128] |

The recipe was chosen by the search of docs/own-table.md on the project's own examples only (flights, caravan,
bikeshare; never on the held-out ISLP tables of scripts/bench_tabular.sh). What it found: the 300 steps of a sized
run were too few (bikeshare's test RMSE 57 at 300 steps, 39 at 1200), and a 2-wide cut under a linear top kept the
parties' columns from interacting (33 with a 16-wide cut and an MLP top). Piecewise-linear embeddings of every
numeric column, an MLP bottom with dropout, a cosine schedule with weight decay (RealMLP-TD's pieces, Holzmueller
et al., NeurIPS 2024) and lr 3e-3 each lost on caravan (batch 64) and did not win on bikeshare, so the recipe keeps
today's bottom and a constant rate; numeric embeddings stay a declared transform (docs/own-table.md). On flights
(batch 2225) the rate of Adam's square-root rule (2.9e-3) won 0.008 AUC at the same 1200 steps, so the rate grows
with the batch above 256 rows (`recipe_lr`), where the small tables' batches keep 1e-3; a warmup and linear decay
and a narrower bottom ([128, 64]) lost on caravan. The model the
recipe builds is written into the config once (`table_model`), so the cut width every handshake says, the top and
the checkpoint's model digest are one in training. A bottom with any key set keeps today's sizing (SMALL_MODEL where
unset) and its own top: a YAML that sets its model keeps its figures.

Every party sizes the schedule from the same number, the training rows of the private set intersection, so the
batch size the leader's HELLO check compares is the same on both sides; the leader's epochs decide the run, as
always. The model's sizes come from the party's own prepared shard (its manifest's rows). Every checkpoint records
the model training built (vfl/training/trained_model.py), and prediction, serving, export and resume build that one,
whatever the rows of the shard they are given or the recipe's constants then; only a checkpoint written before that
record existed is read by resolving the model from the shard again (`table_model_of_shard`). Criteo-format shards
(no `data.schema`) keep the schema's defaults, so the front door's figures do not move.

A table run shorter than MIN_STEPS optimizer steps is refused with the numbers (vfl/training/run_size.py), unless
`train.allow_short_run: true`.
"""

from __future__ import annotations

import json
import math
import os

from vfl.config.model_sections import BottomConfig, TopConfig
from vfl.config.schema import ConfigError, EarlyStoppingConfig, PartyConfig
from vfl.training.run_size import MIN_STEPS, run_size_warnings

TARGET_STEPS = 300
RECIPE_STEPS = 1200  # with the tuned recipe: early stopping ends the run where the validation metric stops
BATCH_SHARE = 0.01
BATCH_RANGE = (64, 4096)
SMALL_TABLE_ROWS = 1_000_000  # below: the examples' model sizes
SMALL_MODEL = {"embedding_dim": 16, "hidden": (256, 128)}  # a named bottom's unset sizes
TUNED_BOTTOM = {"name": "wide_deep", "embedding_dim": 16, "hidden": (256, 128), "cut_dim": 16}
TUNED_TOP = {"name": "mlp", "hidden": (128,)}  # the leader's, where model.top is unset
RECIPE_PATIENCE = 3
# Adam's square-root scaling rule: a batch kappa times larger takes a rate sqrt(kappa) times larger (Malladi, Lyu,
# Panigrahi, Arora, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", NeurIPS 2022; for SGD, Hoffer,
# Hubara, Soudry, "Train longer, generalize better", NeurIPS 2017). RECIPE_LR is the rate the search tuned at the
# small tables' batch of 64-69 (lr 3e-3 lost there); at or below LR_REFERENCE_BATCH the rate stays RECIPE_LR, so
# only a table with a batch above 256 rows (over ~32k training rows) trains faster: flights' 2225 rows take 2.9e-3.
RECIPE_LR = 1e-3
LR_REFERENCE_BATCH = 256
RECIPE_LR_CAP = 4e-3  # the rule's rate at the sized batch's ceiling of 4096; a larger batch set by hand stays here


def is_table_party(cfg: PartyConfig) -> bool:
    return cfg.data.schema is not None


def shard_rows(manifest: dict) -> int:
    """The rows of a party's prepared shard, every split (its manifest; the same before and after the PSI)."""
    rows = manifest.get("rows") or {}
    return int(sum(int(v) for v in rows.values())) if isinstance(rows, dict) else 0


def tuned(cfg: PartyConfig, rows: int) -> bool:
    """Whether the tuned recipe builds this table party's bottom: no model.bottom key set, under 1M rows."""
    bottom = cfg.model.bottom
    if not is_table_party(cfg) or bottom.import_ is not None or rows >= SMALL_TABLE_ROWS:
        return False
    return not bottom.model_fields_set  # a bottom with any key set keeps today's sizing


def sized_bottom(cfg: PartyConfig, rows: int) -> tuple[BottomConfig, dict]:
    """A table party's bottom with the unset sizes filled for a shard of `rows` rows, and what was filled."""
    bottom = cfg.model.bottom
    if not is_table_party(cfg) or bottom.import_ is not None or rows >= SMALL_TABLE_ROWS:
        return bottom, {}
    model = TUNED_BOTTOM if tuned(cfg, rows) else SMALL_MODEL
    fill = {k: v for k, v in model.items() if k not in bottom.model_fields_set}
    if not fill:
        return bottom, {}
    return bottom.model_copy(update=fill), {
        f"model.bottom.{k}": list(v) if isinstance(v, tuple) else v for k, v in fill.items()
    }


def _keys_unset(model, unset_from):
    """`model` with pydantic's set keys those of `unset_from`: keys the recipe wrote stay unset, so the recipe still
    recognises the config it resolved (table_model is idempotent)."""
    object.__setattr__(model, "__pydantic_fields_set__", set(unset_from.model_fields_set))
    return model


def top_unset(cfg: PartyConfig) -> bool:
    """Whether this is a leader whose model.top has no key set (the recipe's top goes there)."""
    return cfg.is_leader and (cfg.model.top is None or not cfg.model.top.model_fields_set)


def table_model(cfg: PartyConfig, rows: int) -> PartyConfig:
    """The config with the tuned recipe's model written into `model` where the recipe builds it (its bottom, cut
    width included, and the leader's top where model.top is unset), from a shard of `rows` rows: the one model
    config that training, prediction, serving and export read (the cut widths of the handshakes, the top, the model
    digest of checkpoints). A config the recipe does not build is returned as it is, so its bytes and digest stay."""
    if not tuned(cfg, rows):
        return cfg
    bottom = cfg.model.bottom
    fill = {k: v for k, v in TUNED_BOTTOM.items() if k not in bottom.model_fields_set}
    resolved = _keys_unset(bottom.model_copy(update=fill), bottom)
    update = {"bottom": resolved}
    if top_unset(cfg):
        update["top"] = _keys_unset(TopConfig.model_validate(dict(TUNED_TOP)), TopConfig())
    if all(getattr(cfg.model, k) == v for k, v in update.items()):
        return cfg
    return cfg.model_copy(update={"model": cfg.model.model_copy(update=update)})


def table_model_of_shard(cfg: PartyConfig) -> PartyConfig:
    """table_model for the shard at data.path (its manifest's rows): what predict, serve and export resolve for a
    checkpoint that does not record its model (vfl/training/trained_model.py). A path without a manifest: the config
    as it is."""
    path = os.path.join(str(cfg.data.path), "manifest.json")
    if not is_table_party(cfg) or not os.path.exists(path):
        return cfg
    from vfl.data.errors import DataError

    try:
        with open(path) as f:
            manifest = json.load(f)
        rows = shard_rows(manifest if isinstance(manifest, dict) else {})
    except (OSError, ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise DataError(
            f"{path} cannot be read as a shard manifest ({type(e).__name__}: {e}): prepare the shard again"
        ) from None
    return table_model(cfg, rows)


def recipe_lr(batch: int) -> float:
    """The recipe's Adam learning rate for a batch of `batch` rows: RECIPE_LR x sqrt(batch / LR_REFERENCE_BATCH),
    within [RECIPE_LR, RECIPE_LR_CAP]."""
    return min(max(RECIPE_LR * math.sqrt(batch / LR_REFERENCE_BATCH), RECIPE_LR), RECIPE_LR_CAP)


def sized_schedule(
    cfg: PartyConfig, train_rows: int, rows: int | None = None, lr_rule: bool = True
) -> tuple[PartyConfig, dict]:
    """The config with train.batch_size, train.epochs and (leader) train.early_stopping sized for `train_rows` where
    unset (with the tuned recipe, `rows` being the shard's: RECIPE_STEPS instead of TARGET_STEPS, and with lr_rule
    Adam's rate by recipe_lr), and what was filled ({} for a Criteo-format party or where everything was set)."""
    train = cfg.train
    if not is_table_party(cfg) or train_rows <= 0:
        return cfg, {}
    given = train.model_fields_set
    fill: dict = {}
    recipe = rows is not None and tuned(cfg, rows)
    batch = train.batch_size
    if "batch_size" not in given:
        batch = min(max(round(train_rows * BATCH_SHARE), BATCH_RANGE[0]), BATCH_RANGE[1])
        batch = fill["batch_size"] = max(batch, train.microbatches)
    if "epochs" not in given:
        steps_per_epoch = math.ceil(train_rows / batch)
        target = RECIPE_STEPS if recipe else TARGET_STEPS
        fill["epochs"] = min(max(1, math.ceil(target / steps_per_epoch)), 10_000)
    if recipe and lr_rule and "lr" not in given and train.optimizer == "adam":  # the rule is Adam's (recipe_lr)
        fill["lr"] = round(recipe_lr(batch), 6)
    if cfg.is_leader and "early_stopping" not in given:
        fill["early_stopping"] = EarlyStoppingConfig(
            metric="rmse" if train.task == "regression" else "auc", patience=RECIPE_PATIENCE
        )
    if not fill:
        return cfg, {}
    sized = cfg.model_copy(update={"train": train.model_copy(update=fill)})
    dumped = ("early_stopping",)
    shown = {f"train.{k}": (v.model_dump() if k in dumped else v) for k, v in fill.items()}
    return sized, shown


def _shown(value):
    return list(value) if isinstance(value, tuple) else value


def describe(filled: dict, train_rows: int) -> str:
    """One console line: what was sized, from how many rows."""
    parts = []
    for key, value in filled.items():
        if key == "train.early_stopping":
            value = f"on ({value['metric']}, patience {value['patience']})"
        parts.append(f"{key}={value}")
    return f"defaults: sized from the table ({train_rows} training rows), unset in the config: {', '.join(parts)}"


def check_short_run(cfg: PartyConfig, train_rows: int) -> None:
    """ConfigError with the numbers when a table run would train fewer than MIN_STEPS steps (unless
    train.allow_short_run)."""
    if not is_table_party(cfg) or cfg.train.allow_short_run or train_rows <= 0:
        return
    steps = math.ceil(train_rows / cfg.train.batch_size) * cfg.train.epochs
    if steps >= MIN_STEPS:
        return
    why = "; ".join(run_size_warnings(cfg.train.batch_size, cfg.train.epochs, train_rows))
    raise ConfigError(
        f"{why}. Refused: leave train.batch_size and train.epochs unset to size them from the table, or set "
        "train.allow_short_run: true to train it anyway"
    )


def size_table_run(cfg: PartyConfig, shard, log, trained: BottomConfig | None = None) -> tuple[PartyConfig, dict]:
    """After the private set intersection: a table party's schedule sized from the intersection's training rows and
    its model from its shard (BottomParty builds it with `sized_bottom`), the choice said on the console, and a short
    run refused. `trained`: the bottom a resumed checkpoint records (cfg holds its model already; vfl/training/
    trained_model.py), said as the model instead. Returns the config to train with and what was sized ({} if
    nothing): metrics.json's `defaults`."""
    train_rows = len(shard.split("train"))
    rows = shard_rows(shard.manifest)
    top_was_unset = top_unset(cfg)
    # a checkpoint that records no model was written before the learning-rate rule: its run resumes at the rate it
    # trained with (the schema's), not a rate the rule would change mid-run
    older = bool(cfg.train.resume_from) and trained is None
    cfg, filled = sized_schedule(
        cfg if trained is not None else table_model(cfg, rows), train_rows, rows, lr_rule=not older
    )
    sized, bottom_filled = sized_bottom(cfg, rows)
    built = trained or sized
    filled.update({k: _shown(getattr(built, k.rsplit(".", 1)[1])) for k in bottom_filled})
    if top_was_unset and tuned(cfg, rows):
        filled["model.top"] = {k: _shown(getattr(cfg.model.top, k)) for k in TUNED_TOP}
    if filled:
        log(f"{'leader' if cfg.is_leader else 'follower'} {cfg.party}: {describe(filled, train_rows)}")
    if cfg.is_leader:
        check_short_run(cfg, train_rows)
    return cfg, ({"sized": describe(filled, train_rows), "train_rows": train_rows, **filled} if filled else {})
