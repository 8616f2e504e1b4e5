"""Notebook-style walk-through of the Python API: data, shards, a split run with leader + follower, its curves.

Run it as a script (`python examples/notebook/train_with_api.py`) or cell by cell in a notebook
(each `# %%` is a cell). VFL_EXAMPLE_ROWS (default 200000) and VFL_EXAMPLE_OUT (default
runs/notebook) size and place it.
"""

# %% 1. Synthetic Criteo-format rows (the README's default example, smaller)
import os

from vfl.data.synth.criteo import write_synthetic

rows = int(os.environ.get("VFL_EXAMPLE_ROWS", "200000"))
out = os.environ.get("VFL_EXAMPLE_OUT", "runs/notebook")
raw = os.path.join(out, f"synth_{rows}.tsv")
if not os.path.exists(raw):
    write_synthetic(raw, rows, seed=0)

# %% 2. One shard per party (the same code as `vfl-data prepare`), kept when the source and options match
from vfl.data.parties import load_parties
from vfl.data.prepare import PrepareOptions, prepare
from vfl.data.shard_reuse import reusable

shards = os.path.join(out, "shards")
parties, opts = load_parties(None), PrepareOptions(hash_buckets=20_000, force=True)
if not reusable(shards, raw, parties, opts)[0]:
    prepare(raw, shards, parties, opts)

# %% 3. Train: the leader and the follower as two local processes over CurveZMQ (the CLI commands)
from vfl_api import simulate

history = simulate(
    "examples/wide_deep_criteo/leader.yaml",
    ["examples/wide_deep_criteo/follower.yaml"],
    data=shards,
    out=out,
    overrides={"train.epochs": 1, "train.eval_every_steps": 50},
)

# %% 4. What fit/simulate return: per-step losses and the evaluations; metrics.csv, TensorBoard, curves.png
print(f"{len(history.step_losses)} steps, first losses {[round(x, 4) for x in history.step_losses[:3]]}")
for e in history.evaluations:
    print(f"step {e['step']}: valid AUC {e['valid']['auc']:.4f}  test AUC {e['test_auc']:.4f}")
print(f"final test AUC {history.test_auc:.4f} (Bayes-optimal {history.metrics['bayes_test_auc']:.4f})")
print(
    f"curves: {history.csv_path}, {os.path.join(out, 'curves.png')}, tensorboard --logdir {os.path.join(out, 'tensorboard')}"
)
