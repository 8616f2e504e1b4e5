"""Batch prediction, a follower's side: announce the checkpoint, intersect the new ids, answer the leader's ranges.

The follower loads its checkpoint (`<run>/checkpoints/<party>_final.pt`), checks it against its config and keys, reads
its own file of new rows through its frozen transforms (vfl/inference/predict/new_rows.py), and sends PREDICT_HELLO with
its checkpoint's training run, step and fingerprint (vfl/runs/record.py). After PSI it answers each
PREDICT_ROWS (a range of the intersection in ascending id order, checked against the range digest of its own ids there
under the session's key, vfl/session/cut_digest.py, before anything is computed) with PREDICT_CUT, its bottom's cut in
eval mode, until PREDICT_DONE; then BYE. Under privacy.embedding_dp each row's cut is clipped and keyed-noised, and
charged to the model's scope of the follower's send ledger, which serving shares: a value released before is the same
bytes again (free), and an id gets at most privacy.embedding_dp.scoring_releases distinct releases of this model
across every process (vfl/session/cut_release.py).

What it learns: the intersection of the new ids (as in training), the ranges (fixed-size, in id order) and the row
count. Nothing it receives is computed from a score or a label; it writes no prediction.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import torch

from vfl.config.schema import PartyConfig
from vfl.inference.predict.predicting_party import PredictingParty
from vfl.runs.record import pair_fingerprint
from vfl.session.cut_release import CutRelease, lineage_scope, weights_digest
from vfl.session.follower import FollowerSession
from vfl.wire import PROTOCOL_VERSION, WireError
from vfl.wire.messages import Bye
from vfl.wire.predict_messages import PredictCut, PredictDone, PredictHello, PredictRows, PredictWelcome


class FollowerPredictor(PredictingParty):
    """This follower's bottom (from its checkpoint) and new rows; `run(channel, psi)` answers the leader."""

    def __init__(self, cfg: PartyConfig, checkpoint: str, rows_path: str, log, device: torch.device, *, strict=False):
        super().__init__(cfg, checkpoint, rows_path, log, device, strict=strict)
        self.requests = 0
        self.rows_sent = 0
        self._done = False
        self.report_dir = os.path.join(cfg.output.dir, "predict")  # where the embedding-DP report goes
        self.digests = None  # the session's keyed id digests (vfl/session/cut_digest.py), once joined
        # privacy.embedding_dp: each row's cut clipped and keyed-noised, charged to the model's scope of the send
        # ledger shared with serving (a value released before is the same bytes, free; at most scoring_releases)
        self.cut_release = CutRelease(
            cfg.privacy.embedding_dp, cfg.model.bottom.cut_dim, log, cfg.party,
            secret_key_file=cfg.network.secret_key_file,
        )  # fmt: skip
        if self.cut_release.on:
            self.cut_release.plan_scoring(weights_digest(self.model.state_dict()), lineage_scope(self.ckpt))

    def run(self, channel, psi: Callable[[np.ndarray], tuple[np.ndarray, object]]) -> dict:
        """Handshake, PSI (psi(ids) -> (common ids, report)), then answer until PREDICT_DONE; returns what it did."""
        from vfl.session.handshake import new_nonce

        cfg = self.cfg
        self.ch = channel
        session = FollowerSession(cfg, channel)
        cut = cfg.model.bottom.cut_dim
        hello = PredictHello(
            nonce=new_nonce(),
            party=cfg.party,
            protocol=PROTOCOL_VERSION,
            run=self.record["run"],
            step=int(self.record["model_step"]),
            fingerprint=pair_fingerprint(self.record, cfg.party, cut, leader_side=False),
            cut_dim=cut,
            rows=len(self.rows),
            timeout_s=cfg.network.timeout_s,
        )
        welcome: PredictWelcome = session.greet(hello, PredictWelcome)
        session.join(welcome.run)
        self.digests = session.digests  # keyed by (this session's run id, our nonce)
        self.batch_rows = welcome.batch_rows
        common, _ = psi(self.rows.ids)
        missing = self.rows.align(common)
        self.log(f"follower {cfg.party}: {len(self.rows.split)} rows in the intersection ({missing} of ours are not)")
        session.serve({PredictRows: self._on_rows, PredictDone: self._on_done}, lambda: self._done)
        return {"requests": self.requests, "rows_sent": self.rows_sent, "intersection": len(self.rows.split)}

    def _on_rows(self, msg: PredictRows) -> None:
        split = self.rows.split
        n = len(split)
        if not msg.stop <= n or msg.stop - msg.start > self.batch_rows:
            raise WireError(
                f"PREDICT_ROWS {msg.start}..{msg.stop}: outside the {n} rows of the intersection or over "
                f"{self.batch_rows} rows"
            )
        if self.digests.range("predict", msg.start, msg.stop, split.ids[msg.start : msg.stop]) != msg.digest:
            raise WireError(
                f"PREDICT_ROWS {msg.start}..{msg.stop}: the ids' digest differs from the leader's (the intersections "
                "disagree)"
            )
        out = self.cut(msg.start, msg.stop)
        sent = self.cut_release.release(out, "predict", ids=split.ids[msg.start : msg.stop])
        self.ch.post(PredictCut(cut=sent, start=msg.start, stop=msg.stop))
        self.requests += 1
        self.rows_sent += msg.stop - msg.start

    def _on_done(self, msg: PredictDone) -> None:
        if msg.rows != self.rows_sent:
            raise WireError(f"PREDICT_DONE after {msg.rows} rows, but this follower sent cuts of {self.rows_sent}")
        self.ch.post(Bye(steps=self.requests, snapshot_bytes=0))
        self._done = True
        self.log(f"follower {self.cfg.party}: answered {self.requests} requests ({self.rows_sent} rows)")
        if self.cut_release.on:
            self.cut_release.write_report(self.report_dir, f"{self.cfg.party}_predict_embedding_dp.json")
            self.log(self.cut_release.summary())
