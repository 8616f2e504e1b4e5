"""Training curves of a run: metrics.csv (every step and every evaluation), TensorBoard events, and curves.png.

A resumed run continues the same files: rows after the resume step are dropped (they belong to the
interrupted attempt), new rows are appended, TensorBoard purges events past the resume step, and the
PNG is redrawn from the whole CSV at the end.
"""

from __future__ import annotations

import csv
import math
import os

from privacy.durable_files import replacing

COLUMNS = (
    "kind",
    "epoch",
    "step",
    "loss",
    "valid_auc",
    "valid_auc_noisy",
    "valid_logloss",
    "test_auc",
    "test_logloss",
    "samples_per_second",
    "valid_accuracy",
    "test_accuracy",
)  # accuracy: train.task multiclass
# train.task regression: its own columns (a classification run's metrics.csv keeps the columns above)
REGRESSION_COLUMNS = (
    "kind",
    "epoch",
    "step",
    "loss",
    "valid_rmse",
    "valid_mae",
    "valid_r2",
    "test_rmse",
    "test_mae",
    "test_r2",
    "samples_per_second",
)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return str(value)


def read_metrics_csv(path: str) -> list[dict]:
    """The rows of a metrics.csv as dicts of strings ('' = not measured in that row)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def preload_tensorboard() -> None:
    """Import TensorBoard's writer now (it takes seconds), before any peer waits on this process."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        pass


class RunCurves:
    """Writes one party's curves under out_dir; `step()` per training step, `evaluation()` per evaluation."""

    def __init__(
        self, out_dir: str, name: str, start_step: int = 0, tensorboard: bool = True, log=None, regression=False
    ):
        """regression: the columns of a real-valued label (REGRESSION_COLUMNS: RMSE, MAE and R^2)."""
        self.out_dir = out_dir
        self.name = name
        self.csv_path = os.path.join(out_dir, "metrics.csv")
        self.png_path = os.path.join(out_dir, "curves.png")
        self.tb_dir = os.path.join(out_dir, "tensorboard", name)
        self.log = log
        os.makedirs(out_dir, exist_ok=True)
        kept: list[dict] = []
        if start_step > 0 and os.path.exists(self.csv_path):
            kept = [
                r
                for r in read_metrics_csv(self.csv_path)
                if r.get("step", "").isdigit() and int(r["step"]) <= start_step
            ]
        self._f = open(self.csv_path, "w", newline="", buffering=1)
        self._w = csv.DictWriter(
            self._f, fieldnames=REGRESSION_COLUMNS if regression else COLUMNS, extrasaction="ignore"
        )
        self._w.writeheader()
        for r in kept:
            self._w.writerow(r)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(self.tb_dir, purge_step=start_step if start_step > 0 else None)
            except ImportError:  # tensorboard is a dependency; an install without it still gets CSV and PNG
                if log is not None:
                    log.warning(
                        "warning: tensorboard is not installed: no TensorBoard events (pip install tensorboard)"
                    )

    def step(self, epoch: int, step: int, loss: float) -> None:
        self._w.writerow({"kind": "step", "epoch": epoch, "step": step, "loss": _cell(loss)})
        if self.tb is not None:
            self.tb.add_scalar("train/loss", loss, step)

    def evaluation(self, entry: dict) -> None:
        valid = entry.get("valid") or {}
        row = {
            "kind": "eval",
            "epoch": entry["epoch"],
            "step": entry["step"],
            "loss": _cell(entry.get("train_loss")),
            "valid_auc": _cell(valid.get("auc")),
            "valid_auc_noisy": _cell(valid.get("auc_noisy")),
            "valid_logloss": _cell(valid.get("logloss")),
            "test_auc": _cell(entry.get("test_auc")),
            "test_logloss": _cell(entry.get("test_logloss")),
            "samples_per_second": _cell(entry.get("samples_per_second")),
            "valid_accuracy": _cell(valid.get("accuracy")),
            "test_accuracy": _cell(entry.get("test_accuracy")),
        }
        if "test_rmse" in entry:
            row = {k: v for k, v in row.items() if k in REGRESSION_COLUMNS}
            for m in ("rmse", "mae", "r2"):
                row[f"valid_{m}"], row[f"test_{m}"] = _cell(valid.get(m)), _cell(entry.get(f"test_{m}"))
        self._w.writerow(row)
        if self.tb is not None:
            for key, value in row.items():
                if key not in ("kind", "epoch", "step", "loss") and value not in ("", "nan"):
                    self.tb.add_scalar(f"eval/{key}", float(value), entry["step"])
            self.tb.flush()

    def abandon(self) -> None:
        """Close the CSV and TensorBoard files without drawing (the run starts again: vfl/session/rejoin.py)."""
        if not self._f.closed:
            self._f.close()
            if self.tb is not None:
                self.tb.close()

    def close(self, selected_step: int | None = None, bayes: float | None = None) -> None:
        """Close the CSV and TensorBoard files and draw the PNG, marking the step early stopping selected and the
        data's Bayes-optimal test AUC (synthetic data) when they are known."""
        if self._f.closed:
            return
        self._f.close()
        if self.tb is not None:
            self.tb.close()
        try:
            plot_curves(self.csv_path, self.png_path, self.name, selected_step, bayes)
        except Exception as e:  # a plot is a convenience: never fail a finished run for it
            if self.log is not None:
                self.log.warning(f"warning: {self.png_path} not drawn: {e}")


def plot_curves(
    csv_path: str, png_path: str, title: str = "", selected_step: int | None = None, bayes: float | None = None
) -> str:
    """Loss per step (and the evaluation's train loss) beside valid/test AUC (RMSE for a regression) per
    evaluation, as a PNG; a vertical line marks the selected step, a horizontal one the Bayes-optimal AUC."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics_csv(csv_path)
    steps = [(int(r["step"]), float(r["loss"])) for r in rows if r["kind"] == "step" and r["loss"]]
    evals = [r for r in rows if r["kind"] == "eval"]
    fig, (ax_loss, ax_auc) = plt.subplots(1, 2, figsize=(11, 4))
    if steps:
        ax_loss.plot(*zip(*steps), lw=0.8, alpha=0.6, label="batch loss")
    ev_loss = [(int(r["step"]), float(r["loss"])) for r in evals if r["loss"]]
    if ev_loss:
        ax_loss.plot(*zip(*ev_loss), "o-", label="mean loss since last evaluation")
    ax_loss.set_xlabel("global step")
    ax_loss.set_ylabel("training loss")
    name = "RMSE" if evals and "test_rmse" in evals[0] else "AUC"
    for key, label in ((f"valid_{name.lower()}", f"valid {name}"), (f"test_{name.lower()}", f"test {name}")):
        pts = [(int(r["step"]), float(r[key])) for r in evals if r.get(key) not in ("", "nan", None)]
        if pts:
            ax_auc.plot(*zip(*pts), "o-", label=label)
    if selected_step is not None and evals:
        for ax in (ax_loss, ax_auc):
            ax.axvline(selected_step, color="grey", ls="--", lw=1, label=f"selected step {selected_step}")
    if bayes is not None and name == "AUC":
        ax_auc.axhline(bayes, color="black", ls=":", lw=1, label=f"Bayes-optimal test AUC {bayes:.4f}")
    ax_auc.set_xlabel("global step")
    ax_auc.set_ylabel(name)
    if ax_loss.lines:
        ax_loss.legend(loc="best")
    if ax_auc.lines:
        ax_auc.legend(loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        with replacing(png_path) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return png_path
