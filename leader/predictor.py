"""Batch prediction, the leader's side: score a file of new rows with the model training selected, across parties.

Order of a prediction (docs/predict.md):
1. the leader loads its checkpoint (`<run>/checkpoints/<party>_final.pt`: the step model selection chose), checks it
   against its config and keys, and reads its new rows through its frozen transforms
   (vfl/inference/predict/new_rows.py);
2. every follower's PREDICT_HELLO announces its checkpoint's training run, step and fingerprint
   (vfl/runs/record.py); any difference refuses the session with one line naming both sides;
3. PSI on the new ids, as in training; rows of the leader without a match get no score (counted and reported, with
   the rows its reader refused for a malformed id or feature value);
4. the leader walks the intersection in ascending id order in ranges of `batch_rows`: PREDICT_ROWS to every
   follower (up to PREDICT_WINDOW ranges are asked for before the first cut returns, so followers compute while the
   leader scores and a long round trip is paid a few times, not once a range), its own bottom, the followers' PREDICT_CUTs, the top: exactly the training run's evaluation
   (BottomParty and TopTrainer.predict), in eval mode and train.precision;
5. scores go to predictions.parquet / .csv (vfl/inference/predict/outputs.py); with labels in its file, the leader also
   reports AUC and logloss (or accuracy, or RMSE, MAE and R^2) in predict.json, over the scored rows whose label is
   valid (a missing or invalid label keeps its row: scored, in PSI, out of the metrics only). PREDICT_DONE, then
   each BYE.

Only the leader ever holds a score: what a follower receives (the welcome, PSI, the ranges with their id digests,
PREDICT_DONE) is the same whatever the model or the labels: the ids PSI sees depend on the ids and features alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch

from vfl.config.schema import PartyConfig
from vfl.inference.predict.outputs import PredictionWriter
from vfl.inference.predict.predicting_party import PredictingParty
from vfl.obs.progress import bar
from vfl.runs.record import checkpoint_hello_problems
from vfl.session.leader import LeaderSession
from vfl.training.microbatch import embedding_bytes_bound, pipelined
from vfl.wire import PROTOCOL_VERSION
from vfl.wire.messages import Bye
from vfl.wire.predict_messages import PredictCut, PredictDone, PredictHello, PredictRows, PredictWelcome

PREDICT_WINDOW = 4  # ranges asked for ahead of their cuts (4 per connection fit the channel's RCVHWM)


class LeaderPredictor(PredictingParty):
    """The leader's model (from its checkpoint) and its new rows; `run(channel, psi)` scores them with the followers."""

    def __init__(self, cfg: PartyConfig, checkpoint: str, rows_path: str, log, device: torch.device, *, strict=False):
        super().__init__(cfg, checkpoint, rows_path, log, device, strict=strict)  # self.top: the trained top
        self.task = self.shard.task

    def _check_hello(self, f: str, hello: PredictHello) -> list[str]:
        """Every disagreement of a follower's PREDICT_HELLO with the leader's checkpoint, as sentences: they reach
        the followers (the refusal's ABORT), so they name no path of the leader's; its own log names it."""
        problems = checkpoint_hello_problems(self.record, f, hello, None, PROTOCOL_VERSION)
        if problems:
            self.log(
                f"leader {self.cfg.party}: {f}'s PREDICT_HELLO disagrees with the leader's checkpoint "
                f"{self.checkpoint} (run {self.record['run'][:12]}, step {self.record['model_step']})"
            )
        return problems

    def run(self, channel, psi: Callable[[np.ndarray], tuple[np.ndarray, object]], out_dir: str) -> dict:
        """Handshake, PSI (psi(ids) -> (common ids, report)), scoring; returns the report (predict.json)."""
        cfg = self.cfg
        session = LeaderSession(cfg, channel, self.device)
        batch_rows = cfg.train.eval_batch_size
        hellos = session.greet(
            PredictHello,
            self._check_hello,
            lambda f: f"PREDICT_HELLO from follower {f} (is `predict` running there, pointed at {cfg.network.bind}?)",
            error="prediction refused",
        )
        for f, link in session.links.items():  # as serving logs it: a range's cut costs at least this round trip
            self.log(f"leader {cfg.party}: link to {f}: {link.describe()} (timed at its PREDICT_HELLO)")
        session.start_run(
            {f: h.nonce for f, h in hellos.items()},
            lambda f: PredictWelcome(run=channel.run, nonce=hellos[f].nonce, batch_rows=batch_rows),
            unbound=True,  # PREDICT_WELCOME travels outside the run, as the channel's own WELCOME does
        )
        common, psi_report = psi(self.rows.ids)
        missing = self.rows.align(common)
        n, bad = len(self.rows.split), self.rows.stats.bad_rows
        self.log(
            f"leader {cfg.party}: {n} of the {self.rows.rows_in_file} new rows of its file will be scored; "
            f"{missing + bad} get no score ({missing} without a follower row of their id, {bad} refused for a "
            "malformed id or feature value)"
        )
        writer = PredictionWriter(out_dir, self.task, self._class_names())
        t0 = time.perf_counter()
        scores = []
        try:
            self._score(session, batch_rows, writer, scores)
            for f in session.followers:
                channel.post(f, PredictDone(rows=n))
            channel.watch_disconnect = False  # followers leave once they said BYE
            for f in session.followers:
                channel.expect(f, Bye)
            paths = writer.close()
        except BaseException:
            writer.discard()
            raise
        seconds = time.perf_counter() - t0
        report = {
            "rows_in_file": self.rows.rows_in_file,
            "rows_scored": n,
            "rows_without_score": missing + bad,
            "rows_not_held_by_every_party": missing,
            "bad_rows_skipped": bad,
            "predict_seconds": seconds,
            "rows_per_second": n / max(seconds, 1e-9),
            "transform_seconds": self.rows.seconds,
            "oov_fraction": self.rows.oov_fraction(),
            "checkpoint": os.path.abspath(self.checkpoint),
            "training_run": self.record["run"],
            "model_step": self.record["model_step"],
            "task": self.task.to_manifest(),
            "files": paths,
            "session_run": channel.run,
            "psi": psi_report.as_dict() if hasattr(psi_report, "as_dict") else None,
            "links": {f: {"rtt_ms": round(link.rtt_s * 1000, 3)} for f, link in session.links.items()},
        }
        if self.rows.labels is not None:
            report.update(self._metrics(scores))
        return report

    def _metrics(self, scores: list) -> dict:
        """The metrics over the scored rows whose label is valid, and how many rows they cover."""
        valid = self.rows.label_valid
        out = {"rows_evaluated": int(valid.sum()), "rows_without_valid_label": int(valid.size - valid.sum())}
        self.log(
            f"leader {self.cfg.party}: metrics over the {out['rows_evaluated']} scored rows with a valid label; "
            f"{out['rows_without_valid_label']} scored rows have a missing or invalid label (left out of them)"
        )
        if out["rows_evaluated"]:
            from vfl.obs.metrics import test_metrics

            m = test_metrics(self.rows.labels[valid], np.concatenate(scores)[valid], self.task.is_regression)
            out["metrics"] = {k[5:]: v for k, v in m.items()}
        return out

    def _class_names(self) -> list[str] | None:
        classes = (self.shard.manifest.get("label") or {}).get("classes")
        return [str(c) for c in classes] if classes else None

    def _score(self, session: LeaderSession, batch_rows: int, writer: PredictionWriter, scores: list) -> None:
        split, rows = self.rows.split, self.rows
        n = len(split)
        ranges = [(i, min(i + batch_rows, n)) for i in range(0, n, batch_rows)]
        keep = rows.labels is not None

        def ask(k: int) -> None:
            if k < len(ranges):
                lo, hi = ranges[k]
                for f in session.followers:  # a follower cuts only rows we can name, by its session's key
                    digest = session.digests[f].range("predict", lo, hi, split.ids[lo:hi])
                    session.ch.post(f, PredictRows(start=lo, stop=hi, digest=digest))

        progress = bar(total=n, desc="predict", unit="row")
        for k in range(PREDICT_WINDOW):
            ask(k)
        # while the leader awaits one follower's cut, another may have sent all its cuts of the window: each is one
        # range's cut at most (the window's bound on what waits here)
        with pipelined(session.ch, PREDICT_WINDOW, embedding_bytes_bound(batch_rows, session.cut_dims.values())):
            for k, (lo, hi) in enumerate(ranges):
                remote = [
                    session.expect_cut(f, PredictCut, lambda m, lo=lo, hi=hi: _range_problem(m, lo, hi), hi - lo)
                    for f in session.followers
                ]
                ask(k + PREDICT_WINDOW)  # the followers compute the next ranges while the leader scores this one
                own = self.cut(lo, hi)
                probs = self.top.predict([own, *remote])
                writer.write(split.ids[lo:hi], probs, rows.row_index[lo:hi])
                if keep:
                    scores.append(probs)
                progress.update(hi - lo)
        progress.close()


def _range_problem(msg: PredictCut, lo: int, hi: int) -> str | None:
    if (msg.start, msg.stop) != (lo, hi):
        return f"expected the cut of rows {lo}..{hi}, got {msg.start}..{msg.stop}"
    return None
