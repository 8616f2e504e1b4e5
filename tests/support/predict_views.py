"""A prediction in this process over the in-memory channel pair, and what its follower sees of it.

The real PSI included; every message the leader sent the follower, byte for byte, under fixed randomness."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd


def fixed_randomness(monkeypatch, seed: int = 5) -> None:
    """Every draw of `secrets` (PSI exponents, shuffles, padding, tickets, nonces) from a seeded generator per thread
    (the leader in the main thread, the follower in its own), so two predictions draw the same randomness and a
    follower's views of them can be compared byte for byte: any difference then comes from the leader's inputs."""
    import random
    import secrets
    import threading

    rngs: dict[str, random.Random] = {}

    def rng() -> random.Random:
        name = threading.current_thread().name
        return rngs.setdefault(name, random.Random(f"{seed}/{name}"))

    monkeypatch.setattr(secrets, "token_bytes", lambda n=None: rng().randbytes(32 if n is None else n))
    monkeypatch.setattr(secrets, "randbits", lambda k: rng().getrandbits(k))


def wire_view(messages) -> list:
    """Messages as their wire content: (type, meta as JSON, each tensor's dtype, shape and bytes); LINK_REPORT's
    timings left out (the round trip the leader's clock measured at the greeting, before any label or score)."""
    out = []
    for m in messages:
        meta, tensors = m.to_wire()
        if m.TYPE == "LINK_REPORT":
            meta = {k: v for k, v in meta.items() if k not in ("rtt_ms", "down_mbit", "up_mbit")}
        arrays = [(np.asarray(t).dtype.str, np.asarray(t).shape, np.asarray(t).tobytes()) for t in tensors]
        out.append((m.TYPE, json.dumps(meta, sort_keys=True, default=repr), arrays))
    return out


def follower_view(trained, tmp_path, monkeypatch, leader_rows, follower_rows, perturb_top=False, leak=False):
    """Predict in this process over the in-memory channel pair (every message encoded, decoded and parsed as on the
    wire), the real PSI included (vfl/align/psi, with _fixed_randomness); returns (every message the leader sent the
    follower as _wire_view, the intersection the follower's PSI gave it, the leader's scores, its report).
    leak: plant a leak (a PREDICT_DONE whose row count encodes the first score) for the power test."""
    import threading

    import torch

    from follower.predictor import FollowerPredictor
    from leader.predictor import LeaderPredictor
    from tests.support.memory_channels import MemoryFollowerChannel, MemoryLeaderChannel, _Queues
    from vfl.align.psi.follower_side import follower_psi
    from vfl.align.psi.leader_side import leader_psi
    from vfl.config.schema import load_config
    from vfl.obs.logs import RunLog
    from vfl.wire.messages import Abort
    from vfl.wire.predict_messages import PredictDone

    fixed_randomness(monkeypatch)
    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = RunLog(str(tmp_path / "view.log"), "test")
    lead = LeaderPredictor(cfg["leader"], str(ckpts / "leader_final.pt"), str(leader_rows), log, torch.device("cpu"))
    follower = FollowerPredictor(
        cfg["follower0"], str(ckpts / "follower0_final.pt"), str(follower_rows), log, torch.device("cpu")
    )
    if perturb_top:  # another top: every score changes
        with torch.no_grad():
            for p in lead.top.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    if leak:
        score = lead._score

        def leaky(session, batch_rows, writer, scores):
            score(session, batch_rows, writer, scores)
            session.post_all(PredictDone(rows=int(1e6 * float(np.ravel(scores[0])[0]))))

        lead._score = leaky
    queues = _Queues(("follower0",))
    leader_channel, follower_channel = MemoryLeaderChannel("leader", queues), MemoryFollowerChannel("follower0", queues)
    errors, learnt = [], {}

    def follower_side_psi(ids):
        learnt["common"], report = follower_psi(follower_channel, ids)
        return learnt["common"], report

    def follow():
        try:
            follower.run(follower_channel, follower_side_psi)
        except Exception as e:  # noqa: BLE001 - the planted leak makes the follower refuse; its view is still kept
            errors.append(e)
            follower_channel.post(Abort(f"follower0: {e}"))  # as vfl.cli.run_party: the leader is told at once

    thread = threading.Thread(target=follow, name="follower0-view", daemon=True)
    thread.start()
    report = None
    try:
        report = lead.run(
            leader_channel, lambda ids: leader_psi(leader_channel, ["follower0"], ids), str(tmp_path / "out")
        )
    except Exception as e:  # noqa: BLE001 - as above
        errors.append(e)
    thread.join(30)
    for r in (lead.rows, follower.rows):
        r.close()
    assert leak or not errors, errors
    view = wire_view(m for s, r, m in queues.posted if s == "leader" and r == "follower0")
    scores = pd.read_parquet(tmp_path / "out" / "predictions.parquet")["score"].to_numpy() if not leak else None
    return view, learnt.get("common"), scores, report


def view_files(trained, tmp_path) -> dict:
    """Small files of new rows (fewer ids than PSI's parallel threshold): the follower holds raw rows 100..399, the
    leader rows 0..299 in four versions: as they are; flipped, with 40 blank (rows 80..119) and 25
    invalid ("2", "x", "nan", " ", "-1", "1.5"; rows 150..169 and 200..204); without the label column; and with a
    malformed feature value in rows 0..2 and 110..111."""
    raw = {p: pd.read_csv(trained["rows"][p], sep="\t", dtype=str, keep_default_na=False) for p in trained["rows"]}
    follower = tmp_path / "follower.tsv"
    raw["follower0"].iloc[100:400].to_csv(follower, sep="\t", index=False)
    leader = raw["leader"].iloc[:300].reset_index(drop=True)
    versions = {"as_is": leader.copy(), "no_label": leader.drop(columns=["label"])}
    varied = leader.copy()
    varied["label"] = np.where(varied["label"] == "1", "0", "1")
    varied.loc[80:119, "label"] = ""  # outcome not known yet: half outside, half inside the intersection
    varied.loc[150:169, "label"] = ["2", "x", "nan", " ", "-1"] * 4
    varied.loc[200:204, "label"] = "1.5"  # a fraction; "1.0" would be class 1, as in any table
    versions["varied"] = varied
    malformed = leader.copy()
    malformed.loc[0:2, "I1"] = "abc"  # refused for a feature value: rows 0..2 (outside), 110..111 (inside)
    malformed.loc[110:111, "I1"] = "abc"
    versions["malformed"] = malformed
    paths = {"follower": follower}
    for name, df in versions.items():
        paths[name] = tmp_path / f"leader_{name}.tsv"
        df.to_csv(paths[name], sep="\t", index=False)
    paths["ids"] = {
        "leader": raw["leader"]["id"].iloc[:300].to_numpy(),
        "follower": raw["follower0"]["id"].iloc[100:400].to_numpy(),
    }
    return paths
