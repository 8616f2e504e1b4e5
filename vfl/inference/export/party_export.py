"""Export one party's trained model with its frozen transforms, for a serving stack without this project's code.

`python -m leader export` / `python -m follower export` write OUT/<party>/:
- `model.onnx`: raw column values and categorical keys in (vfl/inference/export/onnx_transforms.py's INPUTS), the
  party's bottom after its transforms; a follower's output is its `cut` (float32, rows x cut_dim), the leader's
  is the `score` (its bottom and its top, with `follower_cuts` as one more input: the followers' cuts
  concatenated in network.followers order): a probability (binary, float32), K class probabilities (float64)
  or the value in the label's units (regression, float64), as the training run's own evaluation computes them;
- `export.json`: what the inputs are (column names in order, how categorical text becomes a key), the output,
  the checkpoint (step, SHA-256) and the check that was made.

ONNX is written by torch.onnx (opset 18) and checked with onnxruntime against the torch model on rows of the
party's own shard before it is kept. A model that does not export cleanly (a user's module with an operator
ONNX lacks) is written as TorchScript (`model.pt`, taking the bottom's inputs) beside `transforms.onnx`.
Inference is in float32 whatever train.precision was. The files carry the party's vocabularies and numeric
statistics in the clear (docs/export.md, "What the files reveal"): they are as sensitive as the party's data.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np

from privacy.durable_files import file_sha256, replacing, write_bytes
from vfl.inference.export.onnx_engine import CHECK_TOLERANCE, module_to_onnx, onnx_max_diff
from vfl.inference.export.onnx_transforms import KEY_SCHEMES, FrozenTable, frozen_table, transforms_model
from vfl.inference.party_model import load_party_model, scorer, top_in_dim

EXPORT_FORMAT = 1
CHECK_ROWS = 256  # rows of the party's shard the export is checked on


class ExportError(RuntimeError):
    """The export cannot be written (a one-line reason)."""


def _sample_inputs(shard, follower_width: int | None):
    """Model inputs of the first CHECK_ROWS rows of the shard's train split (and random follower cuts)."""
    import torch

    split = shard.split("train")
    rows = np.arange(min(CHECK_ROWS, len(split)))
    if rows.size < 2:
        raise ExportError(f"shard {shard.path}: fewer than 2 training rows to check the export on")
    dense, missing, cat = split.features(rows)
    inputs = [dense, missing, cat]
    if follower_width is not None:
        gen = torch.Generator().manual_seed(0)
        inputs.append(torch.randn(rows.size, follower_width, generator=gen))
    return tuple(inputs)


def export_party(cfg, out_dir: str, checkpoint: str | None = None, log=print) -> dict:
    """Write OUT/<party>/ (see the module docstring); returns export.json's content."""
    import onnx
    import onnxruntime
    import torch

    from vfl.data.shards import PartyShard

    shard = PartyShard(cfg.data.path)
    if shard.name != cfg.party:
        raise ExportError(f"data.path {cfg.data.path} is the shard of {shard.name!r}, not of {cfg.party!r}")
    checkpoint = checkpoint or os.path.join(cfg.output.dir, "checkpoints", f"{cfg.party}_final.pt")
    bottom, top, ckpt, _ = load_party_model(cfg, shard, checkpoint, need_run=False)
    table = frozen_table(cfg.data.path)
    width = None
    if top is not None:
        width = top_in_dim(top) - cfg.model.bottom.cut_dim
        module, output = scorer(bottom, top, shard.task), "score"
    else:
        module, output = bottom, "cut"
    inputs = _sample_inputs(shard, width)
    names = ["dense", "dense_missing", "cat"] + (["follower_cuts"] if width is not None else [])
    with torch.no_grad():
        want = module(*inputs).numpy()
    feeds = {n: t.numpy() for n, t in zip(names, inputs)}
    model, why = module_to_onnx(module, inputs, names, output)
    diff = None
    if model is not None:
        diff = onnx_max_diff(model.SerializeToString(), feeds, want)
        if not diff <= CHECK_TOLERANCE:
            why, model = f"onnxruntime differs from torch by {diff:.3g} (> {CHECK_TOLERANCE}) on the shard's rows", None
    directory = os.path.join(out_dir, cfg.party)
    os.makedirs(directory, exist_ok=True)
    transforms = transforms_model(table)
    if model is not None:
        transforms.ir_version = model.ir_version  # torch.onnx's; merge_models needs them equal
        used = {i.name for i in model.graph.input}  # torch.onnx drops an input the model never reads
        merged = onnx.compose.merge_models(
            transforms,
            model,
            io_map=[(n, n) for n in ("dense", "dense_missing", "cat") if n in used],
            inputs=[*(i.name for i in transforms.graph.input), *(["follower_cuts"] if width is not None else [])],
            outputs=[output],
        )
        onnx.checker.check_model(merged)
        files = {"model": "model.onnx"}
        write_bytes(os.path.join(directory, "model.onnx"), merged.SerializeToString())
    else:
        log(f"{cfg.party}: ONNX export refused ({why}); writing TorchScript model.pt and transforms.onnx")
        with warnings.catch_warnings():  # torch.jit is deprecated in favour of torch.export, which has no file
            warnings.simplefilter("ignore")  # format a serving stack loads without torch's Python
            traced = torch.jit.trace(module, inputs, check_trace=True)
        files = {"model": "model.pt", "transforms": "transforms.onnx"}
        with replacing(os.path.join(directory, "model.pt")) as tmp:
            traced.save(tmp)
        write_bytes(os.path.join(directory, "transforms.onnx"), transforms.SerializeToString())
    doc = _manifest(cfg, shard, table, ckpt, checkpoint, files, width, output, diff, why)
    doc["runtime"] = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__}
    write_bytes(os.path.join(directory, "export.json"), (json.dumps(doc, indent=2) + "\n").encode())
    log(
        f"{cfg.party}: exported step {doc['checkpoint']['step']} to {directory} ({files['model']}"
        + (f", checked against torch on {CHECK_ROWS} rows: max diff {diff:.2g})" if diff is not None else ")")
    )
    return doc


def _manifest(cfg, shard, table: FrozenTable, ckpt, checkpoint, files, width, output, diff, why) -> dict:
    task = shard.task
    if output == "cut":
        out = {"name": "cut", "dtype": "float32", "shape": ["n", cfg.model.bottom.cut_dim]}
    elif task.kind == "binary":
        out = {"name": "score", "dtype": "float32", "shape": ["n"], "meaning": "probability of the positive class"}
    elif task.kind == "multiclass":
        out = {"name": "score", "dtype": "float64", "shape": ["n", task.outputs], "meaning": "class probabilities"}
    else:
        out = {"name": "score", "dtype": "float64", "shape": ["n"], "meaning": "predicted value in the label's units"}
    inputs = {
        "id_column": table.id_column,
        "numeric": [c.name for c in table.numeric],
        "categorical": [c.name for c in table.categorical],
        "key_scheme": table.key_scheme,
        "categorical_keys": KEY_SCHEMES[table.key_scheme],
        "numeric_missing": "True where the value is missing (the value itself is then ignored)",
    }
    if width is not None:
        inputs["follower_cuts"] = {"width": width, "order": list(cfg.network.followers)}
    return {
        "format": EXPORT_FORMAT,
        "party": cfg.party,
        "role": cfg.role,
        "files": files,
        "inputs": inputs,
        "output": out,
        "task": task.kind if task is not None else None,
        "checkpoint": {
            "path": os.path.abspath(checkpoint),
            "sha256": file_sha256(checkpoint),
            "epoch": ckpt.get("epoch"),
            "step": selected_step(ckpt),  # the step of the weights exported (model selection's)
            "trained_steps": ckpt.get("step"),  # the step training ended at
        },
        "check": {"rows": CHECK_ROWS, "max_abs_diff": diff, "fallback_reason": why},
    }


def selected_step(ckpt: dict):
    """The step whose weights the checkpoint holds: the run record's model_step (the step model selection restored
    before the final save), else the checkpoint's own step (a checkpoint without a run record)."""
    record = (ckpt.get("extra") or {}).get("run")
    if isinstance(record, dict) and record.get("model_step") is not None:
        return int(record["model_step"])
    return ckpt.get("step")
