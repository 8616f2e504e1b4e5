"""A trained split model in use, over real processes on 127.0.0.1: `serve` answers with the scores of batch
prediction (`python -m leader|follower predict`, itself equal to the training run's evaluation); a hung or dead follower gives a clear error within the request's deadline; the follower
logs every id it is asked about; and the export of both parties, loaded in a fresh process that imports neither this
project nor torch, gives the same scores from the parties' raw files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import yaml

from tests.support.party_processes import Procs, free_port
from tests.support.served_table import trained_table

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-party run (leader + telco, who holds ~90% of the customers) trained on a generated table."""
    return trained_table(tmp_path_factory.mktemp("served"), 2500, 5)


@pytest.fixture(scope="module")
def predicted(trained) -> dict[int, float]:
    """{id: score} of 150 customers of the test split (held by both parties) by batch prediction: `simulate_predict`,
    i.e. `python -m leader|follower predict` on those rows of the parties' own files (equal to the training run's
    evaluation to 1e-6, tests/inference/test_predict.py)."""
    from vfl.data.ids import ids64
    from vfl_api import simulate_predict

    tmp, cfgs, frames = trained["tmp"], trained["cfgs"], trained["frames"]
    test_ids = set(np.load(tmp / "shards" / "leader" / "test" / "ids.npy").tolist())
    telco = frames["telco"]
    chosen = [t for t, i in zip(telco["cust"], ids64(telco["cust"]).tolist()) if i in test_ids][:150]
    rows = {p: frames[p][frames[p]["cust"].isin(chosen)] for p in ("leader", "telco")}
    out = simulate_predict(
        cfgs["leader"], [cfgs["telco"]], rows, run=str(tmp / "out"), data=str(tmp / "shards"), keys=str(tmp / "keys")
    )
    assert len(out) == len(chosen)
    return dict(zip(out["id"].tolist(), out["score"].tolist()))


def _start(procs: Procs, name: str, role: str, cfg: str, log: str, *extra: str) -> None:
    procs.start_argv(name, [sys.executable, "-m", role, "serve", "--config", cfg, *extra], log=log)


def _post(port: int, doc: dict, timeout: float = 10.0) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/score", json.dumps(doc).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return status, json.loads(body), time.perf_counter() - t0


def test_serve_answers_with_the_batch_prediction_scores_a_hung_or_dead_follower_errs_within_the_deadline_and_can_return(
    trained, predicted
):
    from vfl.data.ids import ids64

    # Prepare: both parties serving the run's final checkpoints; the ids of the test split, one customer telco
    # lacks, and one nobody holds
    tmp, cfgs = trained["tmp"], trained["cfgs"]
    want = predicted
    leader_ids = set(ids64(trained["frames"]["leader"]["cust"]).tolist())
    not_at_telco = sorted(leader_ids - set(ids64(trained["frames"]["telco"]["cust"]).tolist()))[0]
    port, http = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    procs = Procs()
    try:
        _start(
            procs, "telco", "follower", cfgs["telco"], str(tmp / "f.out"), "--connect", endpoint, "--rows-per-s", "1e6"
        )
        _start(
            procs,
            "leader",
            "leader",
            cfgs["leader"],
            str(tmp / "l.out"),
            "--bind",
            endpoint,
            "--http",
            f"127.0.0.1:{http}",
        )
        procs.wait_for_line("leader", str(tmp / "l.out"), "scoring on", timeout=90)
        # (the leader accepts from telco one batch's cut, 1024 ids x its cut width, float32, their positions and a
        # header)
        cut = yaml.safe_load(open(cfgs["telco"]))["model"]["bottom"]["cut_dim"]
        limit = int(open(tmp / "l.out").read().split("a follower's message at most ")[1].split()[0])
        assert limit <= 1024 * (4 * cut + 8) + (1 << 16) + 8, limit
        ids = list(want)
        # Execute: one request of ids, one text id (hashed as the files' ids are), and the two without a score
        status, doc, _ = _post(http, {"ids": [*ids, not_at_telco, "cust-no-such-one"]})
        # Assert: batch prediction's scores to 1e-6; no score (and why) where a party lacks the row
        assert status == 200, doc
        got = np.array(doc["scores"][: len(ids)], dtype=np.float64)
        np.testing.assert_allclose(got, [want[i] for i in ids], atol=1e-6, rtol=0)
        assert doc["scores"][-2:] == [None, None]
        assert [(m["index"], m["reason"]) for m in doc["missing"]] == [
            (len(ids), "unknown to telco"),
            (len(ids) + 1, "unknown to the leader"),
        ]
        log = open(tmp / "out" / "telco_served_ids.log").read()
        # every id asked about is logged; the one the leader lacks was asked of nobody
        assert f"rows={len(ids) + 1} answered unknown=1 ids={','.join(map(str, [*ids, not_at_telco]))}" in log

        # Execute: the follower hangs (stopped), then comes back; then it dies
        os.killpg(procs.procs["telco"].pid, signal.SIGSTOP)
        hung = _post(http, {"ids": ids[:3], "deadline_ms": 700})
        os.killpg(procs.procs["telco"].pid, signal.SIGCONT)
        back = _post(http, {"ids": ids[:3], "deadline_ms": 5000})
        os.killpg(procs.procs["telco"].pid, signal.SIGKILL)
        procs.procs["telco"].wait(timeout=10)
        dead = [_post(http, {"ids": ids[:3], "deadline_ms": 700}) for _ in range(2)]
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=5).read())
        # Assert: a clear error within the deadline each time (never a hang), and scores again once it answers
        assert hung[0] == 504 and "telco did not answer within" in hung[1]["error"] and hung[2] < 0.7 + 0.5, hung
        assert back[0] == 200 and np.allclose(back[1]["scores"], [want[i] for i in ids[:3]], atol=1e-6), back
        for status, body, seconds in dead:
            assert status in (503, 504) and "telco" in body["error"] and seconds < 0.7 + 0.5, (status, body, seconds)
        assert dead[-1][0] == 503 and "down" in dead[-1][1]["error"]
        assert health["status"] == "degraded" and health["followers"]["telco"] != "up"

        # Execute: the follower is started again
        _start(procs, "telco", "follower", cfgs["telco"], str(tmp / "f2.out"), "--connect", endpoint)
        procs.wait_for_line("telco", str(tmp / "f2.out"), "serving the leader", timeout=90)
        again = _post(http, {"ids": ids[:3], "deadline_ms": 5000})
        # Assert: the leader greeted it again and scores as before
        assert again[0] == 200 and np.allclose(again[1]["scores"], [want[i] for i in ids[:3]], atol=1e-6), again

        # Execute: the leader is stopped (SIGTERM)
        os.killpg(procs.procs["leader"].pid, signal.SIGTERM)
        # Assert: both parties end cleanly, the follower told why
        assert procs.procs["leader"].wait(timeout=30) == 0
        assert procs.procs["telco"].wait(timeout=30) == 0
        assert "the leader stopped serving" in open(tmp / "f2.out").read()
    finally:
        procs.cleanup()


FRESH_SCORER = r"""
import json, sys
import numpy as np, onnxruntime as ort, pandas as pd

export, tables, id_texts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
NA = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")


def inputs(party):
    # the raw columns of the party's own file, as docs/export.md says to feed them
    meta = json.load(open(f"{export}/{party}/export.json"))["inputs"]
    frame = pd.read_csv(tables[party], dtype=str, keep_default_na=False).set_index(meta["id_column"]).loc[id_texts]
    num = frame[meta["numeric"]].apply(lambda c: c.str.strip())
    numeric_missing = num.isin(NA).to_numpy()
    numeric = np.where(numeric_missing, 0.0, num.where(~num.isin(NA), "0").astype(float).to_numpy())
    keys, cat_missing = [], []
    for c in meta["categorical"]:
        text = frame[c].str.strip().to_numpy(dtype=object)
        k = pd.util.hash_array(text, encoding="utf8", hash_key="vfl-categories01", categorize=True).astype(np.uint64)
        miss = pd.Series(text).isin(NA).to_numpy()
        k[miss], k[(k == 0) & ~miss] = 0, 1
        keys.append(k)
        cat_missing.append(miss)
    n = len(id_texts)
    return {
        "numeric": numeric.reshape(n, -1),
        "numeric_missing": numeric_missing.reshape(n, -1),
        "cat_key": np.stack(keys, 1).view(np.int64) if keys else np.zeros((n, 0), np.int64),
        "cat_missing": np.stack(cat_missing, 1) if keys else np.zeros((n, 0), bool),
    }


follower = ort.InferenceSession(f"{export}/telco/model.onnx", providers=["CPUExecutionProvider"])
(cut,) = follower.run(None, inputs("telco"))
leader = ort.InferenceSession(f"{export}/leader/model.onnx", providers=["CPUExecutionProvider"])
(score,) = leader.run(None, {**inputs("leader"), "follower_cuts": cut})
print(json.dumps({"scores": score.tolist(), "imported": sorted(m for m in ("vfl", "torch") if m in sys.modules)}))
"""


def test_export_loaded_in_a_fresh_process_gives_the_batch_prediction_scores_from_the_raw_files(
    trained, predicted, procs
):
    from vfl.data.ids import ids64

    # Prepare: both parties export their final checkpoint (two processes at once)
    tmp, cfgs = trained["tmp"], trained["cfgs"]
    for party, role in (("leader", "leader"), ("telco", "follower")):
        procs.start_argv(
            party, [sys.executable, "-m", role, "export", "--config", cfgs[party], "--out", str(tmp / "export")]
        )
    for party in ("leader", "telco"):
        code, _, err = procs.wait(party, timeout=120)
        assert code == 0, err
        assert json.load(open(tmp / "export" / party / "export.json"))["files"] == {"model": "model.onnx"}
    want = predicted
    texts = trained["frames"]["telco"]["cust"].tolist()
    by_id = dict(zip(ids64(texts).tolist(), texts))
    id_texts = [by_id[i] for i in want]
    tables = {p: str(tmp / f"{p}.csv") for p in ("leader", "telco")}
    # Execute: a process that imports onnxruntime, numpy and pandas only
    done = subprocess.run(
        [sys.executable, "-c", FRESH_SCORER, str(tmp / "export"), json.dumps(tables), json.dumps(id_texts)],
        cwd=str(tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert: batch prediction's scores to 1e-6, computed without this project's code or torch
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["imported"] == []
    np.testing.assert_allclose(out["scores"], [want[i] for i in ids64(id_texts).tolist()], atol=1e-6, rtol=0)


def test_a_model_onnx_cannot_hold_is_exported_as_torchscript_beside_its_transforms(trained, tmp_path, monkeypatch):
    import onnxruntime as ort
    import torch

    import vfl.inference.export.party_export as export
    from vfl.config.schema import load_config
    from vfl.data.readers.read_stats import ReadStats
    from vfl.data.readers.table_file import read_table_blocks

    # Prepare: torch.onnx refuses the follower's model (as it does an operator ONNX lacks)
    cfg = load_config(trained["cfgs"]["telco"])
    monkeypatch.setattr(export, "module_to_onnx", lambda *a, **k: (None, "planted: no ONNX for this module"))
    # Execute
    doc = export.export_party(cfg, str(tmp_path), log=lambda line: None)
    # Assert: TorchScript and the transforms' ONNX, which together give the torch model's cut of raw rows
    assert doc["files"] == {"model": "model.pt", "transforms": "transforms.onnx"}
    assert doc["check"]["fallback_reason"] == "planted: no ONNX for this module"
    (block,) = list(
        read_table_blocks(str(trained["tmp"] / "telco.csv"), cfg.data.schema, False, False, False, ReadStats())
    )
    transforms = ort.InferenceSession(str(tmp_path / "telco" / "transforms.onnx"), providers=["CPUExecutionProvider"])
    feeds = {
        "numeric": block.numeric[:64],
        "numeric_missing": block.numeric_missing[:64],
        "cat_key": block.cat_key[:64].view(np.int64),
        "cat_missing": block.cat_missing[:64],
    }
    dense, missing, cat = transforms.run(None, feeds)
    scripted = torch.jit.load(str(tmp_path / "telco" / "model.pt"))
    bottom = _bottom_of(cfg)
    with torch.no_grad():
        got = scripted(torch.from_numpy(dense), torch.from_numpy(missing), torch.from_numpy(cat)).numpy()
        want = bottom(torch.from_numpy(dense), torch.from_numpy(missing), torch.from_numpy(cat)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def _bottom_of(cfg):
    """The party's bottom as serving and export load it."""
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import load_party_model as load

    checkpoint = f"{cfg.output.dir}/checkpoints/{cfg.party}_final.pt"
    return load(cfg, PartyShard(cfg.data.path), checkpoint)[0]
