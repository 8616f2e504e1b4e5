"""Serving new customers (issue 41 item 4): each party's `serve --new-rows PATH` answers ids it has not prepared from
its own file or directory of rows, through its frozen training-time transforms (batch prediction's path: the same
scores), reloaded when the files change; a party still answers only ids it holds, and the leader asks the followers
only about ids it holds."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pandas as pd
import pytest

from tests.support.party_processes import Procs, free_port
from tests.support.table_run import table_run

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return table_run(str(tmp_path_factory.getbasetemp() / "table_run"))


class _Log:
    def __init__(self):
        self.lines, self.warnings = [], []

    def __call__(self, text: str) -> None:
        self.lines.append(text)

    def warning(self, text: str) -> None:
        self.warnings.append(text)


def _wait(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_serving_rows_find_prepared_then_new_ids_and_reload_a_changed_directory_whole(run, tmp_path):
    from vfl.data.ids import ids64
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import RowTable
    from vfl.inference.predict.new_rows import NewRows
    from vfl.inference.serve.serving_rows import ServingRows

    # Prepare: telco's prepared table and a directory holding its file of new customers
    shard_dir = os.path.join(run["run"], "shards", "telco")
    prepared = RowTable(PartyShard(shard_dir))
    source = tmp_path / "new"
    source.mkdir()
    shutil.copy(run["new"]["telco"], source / "a.csv")
    new_ids = ids64(run["new_frames"]["telco"]["cust"])
    old_id = int(prepared.sorted_ids[5])
    log = _Log()
    rows = ServingRows(prepared, str(source), shard_dir, str(tmp_path), log, poll_s=0.05)
    # Execute
    rows.start()
    try:
        table = rows.snapshot()
        found = table.rows_of(np.array([old_id, new_ids[0], new_ids[1], 12345], np.int64))
        got = [a.numpy() for a in table.features(found[1:3])]
        batch = NewRows(shard_dir, run["new"]["telco"], str(tmp_path / "batch"), log)  # batch prediction's path
        want = [np.load(batch._p(n))[:2] for n in ("dense", "dense_missing", "cat")]
        # Assert: a prepared id is its prepared row, a new id its new row with batch prediction's features, an id in
        # neither none
        assert found[0] == prepared.rows_of(np.array([old_id]))[0] and 0 <= found[0] < len(prepared)
        assert found[1] >= len(prepared) and found[2] >= len(prepared) and found[3] == -1
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w.astype(g.dtype))

        # Execute: a second file with one more customer, and one of the prepared ids with other values
        frame = run["new_frames"]["telco"].iloc[:1].copy()
        frame["cust"] = ["late-1"]
        again = run["frames"]["telco"].iloc[:1].copy()
        again["tenure"] = again["tenure"] + 3.0
        pd.concat([frame, again]).to_csv(source / "b.csv", index=False)
        late, again_id = (int(i) for i in ids64(["late-1", again["cust"].iloc[0]]))
        # Assert: the reload serves it, with the first file's rows; a prepared id keeps its prepared row
        assert _wait(lambda: rows.snapshot().rows_of(np.array([late]))[0] >= 0), log.lines + log.warnings
        assert rows.snapshot().rows_of(np.array([new_ids[0]]))[0] >= len(prepared)
        assert rows.snapshot().rows_of(np.array([again_id]))[0] == prepared.rows_of(np.array([again_id]))[0] >= 0

        # Execute: a file that repeats an id of another file (no load can hold it)
        frame.to_csv(source / "c.csv", index=False)
        # Assert: one warning naming the files; the previous load is still served
        assert _wait(lambda: len(log.warnings) > 0), log.lines
        assert "appears twice" in log.warnings[0] and "c.csv" in log.warnings[0]
        assert rows.snapshot().rows_of(np.array([late]))[0] >= 0
    finally:
        rows.close()


def test_a_file_finished_while_a_failed_load_unwinds_is_loaded_and_no_spill_is_left(run, tmp_path, monkeypatch):
    import gzip

    from vfl.data.ids import ids64
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import RowTable
    from vfl.inference.serve import serving_rows

    # Prepare: a source with one good file; a writer lands a gzip file in two writes, the second just after a load
    # read its truncated first half and failed (the window between a failed load and its bookkeeping)
    shard_dir = os.path.join(run["run"], "shards", "telco")
    source = tmp_path / "new"
    source.mkdir()
    shutil.copy(run["new"]["telco"], source / "a.csv")
    frame = run["new_frames"]["telco"].iloc[:1].copy()
    frame["cust"] = ["late-1"]
    whole = gzip.compress(frame.to_csv(index=False).encode())
    late = int(ids64(["late-1"])[0])
    load = serving_rows.load_new_rows

    def load_then_the_writer_finishes(*a, **k):
        try:
            return load(*a, **k)
        except Exception:
            with open(source / "b.csv.gz", "ab") as f:
                f.write(whole[len(whole) // 2 :])
            raise

    log = _Log()
    rows = serving_rows.ServingRows(RowTable(PartyShard(shard_dir)), str(source), shard_dir, str(tmp_path), log, 0.05)
    rows.start()
    try:
        # Execute
        monkeypatch.setattr(serving_rows, "load_new_rows", load_then_the_writer_finishes)
        (source / "b.csv.gz").write_bytes(whole[: len(whole) // 2])
        assert _wait(lambda: len(log.warnings) > 0), log.lines
        monkeypatch.setattr(serving_rows, "load_new_rows", load)
        # Assert: the finished file is loaded at a later poll, and the failed load left no spill directory behind
        assert _wait(lambda: rows.snapshot().rows_of(np.array([late]))[0] >= 0), log.lines + log.warnings
        assert not [d for d in os.listdir(tmp_path) if d.startswith(".serve-new-rows")]
    finally:
        rows.close()


def _start(procs: Procs, name: str, role: str, args: list[str], log: str) -> None:
    procs.start_argv(name, [sys.executable, "-m", role, "serve", *args], log=log)


def _post(port: int, ids: list) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/score",
        json.dumps({"ids": ids, "deadline_ms": 5000}).encode(),
        {"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_scores_new_customers_as_batch_prediction_does_and_asks_only_about_ids_a_party_holds(run, tmp_path):
    from vfl.data.ids import ids64
    from vfl_api import simulate_predict

    # Prepare: batch prediction's scores of the new customers (each party's own file, its frozen transforms)
    bank_new, telco_new = run["new_frames"]["bank"], run["new_frames"]["telco"]
    predicted = simulate_predict(
        f"{run['configs']}/bank.yaml",
        [f"{run['configs']}/telco.yaml"],
        {"bank": run["new"]["bank"], "telco": run["new"]["telco"]},
        run=run["run"],
        data=os.path.join(run["run"], "shards"),
        keys=os.path.join(run["run"], "keys"),
        out=str(tmp_path / "predict"),
    )
    want = dict(zip(predicted["id"].tolist(), predicted["score"].tolist()))
    both = [c for c in telco_new["cust"] if c in set(bank_new["cust"])][:20]
    bank_only = sorted(set(bank_new["cust"]) - set(telco_new["cust"]))[0]
    trained = run["frames"]["telco"]["cust"].iloc[3]
    # both parties serving with their new rows (copies, so the test can change them)
    files = {p: str(tmp_path / f"serve_{p}.csv") for p in ("bank", "telco")}
    for p in files:
        shutil.copy(run["new"][p], files[p])
    endpoint, http = f"tcp://127.0.0.1:{free_port()}", free_port()
    procs = Procs()
    try:
        _start(
            procs,
            "bank",
            "leader",
            [
                "--config",
                f"{run['configs']}/bank.yaml",
                "--run",
                run["run"],
                "--new-rows",
                files["bank"],
                "--bind",
                endpoint,
                "--http",
                f"127.0.0.1:{http}",
            ],
            str(tmp_path / "bank.out"),
        )
        _start(
            procs,
            "telco",
            "follower",
            [
                "--config",
                f"{run['configs']}/telco.yaml",
                "--run",
                run["run"],
                "--new-rows",
                files["telco"],
                "--connect",
                endpoint,
                "--rows-per-s",
                "1e6",
            ],
            str(tmp_path / "telco.out"),
        )
        procs.wait_for_line("bank", str(tmp_path / "bank.out"), "scoring on", timeout=180)
        # Execute: new customers, one the follower lacks, one trained customer, one nobody holds
        status, doc = _post(http, [*both, bank_only, trained, "nobody-7"])
        # Assert: the new customers score as batch prediction scores them; the trained one scores; the others are
        # missing with the reason only
        assert status == 200, doc
        got = np.array(doc["scores"][: len(both)], dtype=np.float64)
        np.testing.assert_allclose(got, [want[int(i)] for i in ids64(both)], atol=1e-6, rtol=0)
        assert doc["scores"][len(both) + 1] is not None
        assert [(m["index"], m["reason"]) for m in doc["missing"]] == [
            (len(both), "unknown to telco"),
            (len(both) + 2, "unknown to the leader"),
        ]
        served = open(os.path.join(run["run"], "telco_served_ids.log")).read()
        assert str(int(ids64(["nobody-7"])[0])) not in served  # the leader asked nobody about an id it lacks

        # Execute: a customer arrives in both parties' files while they serve
        for p, frame in (("bank", bank_new), ("telco", telco_new)):
            late = frame.iloc[:1].copy()
            late["cust"] = ["arrived-1"]
            pd.concat([frame, late]).to_csv(files[p] + ".tmp", index=False)
            os.replace(files[p] + ".tmp", files[p])
        # Assert: it is scored without a restart
        assert _wait(lambda: _post(http, ["arrived-1"])[1].get("scores") not in (None, [None]), 30)
    finally:
        procs.cleanup()
