"""The red team's averaging attack on embedding DP through the stock leader, over real processes on 127.0.0.1: the
leader's HTTP endpoint asks for one customer 1024 times in one request, again after two `kill -9` restarts of the
follower, and two batch predictions score the customer too. Every answer is the same bytes (the scores are equal bit
for bit, so the follower's cuts were: the rest of each score is the leader's own deterministic part), the follower's
send ledger holds one release of that customer for this model, and serving's and prediction's reports say so.

What the leader can average is one release: the attack's gain, mean error over one send's error, is exactly 1
(the in-memory attack with its error figures and its power test, fresh noise per send, is
tests/session/test_cut_release.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.support.party_processes import Procs, free_port
from tests.support.served_table import trained_table

pytest.importorskip("onnxruntime")
EDP = {"eps": 4.0, "delta": 1e-5, "clip": 1.0}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-party table run (leader + telco) with telco's embedding DP on, 2 epochs."""
    return trained_table(tmp_path_factory.mktemp("served_edp"), 1200, 7, {"telco": {"privacy": {"embedding_dp": EDP}}})


def _post(port: int, doc: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/score", json.dumps(doc).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _serve_follower(procs: Procs, cfg: str, endpoint: str, log: str) -> None:
    procs.start_argv("telco", [sys.executable, "-m", "follower", "serve", "--config", cfg, "--connect", endpoint,
                               "--rows-per-s", "1e9"], log=log)  # fmt: skip


def test_a_leader_asking_for_one_customer_again_and_again_gets_one_release(trained):
    from vfl.data.ids import ids64
    from vfl_api import simulate_predict

    # Prepare: a customer of the test split both parties hold; both parties serving the final checkpoints
    tmp, cfgs, frames = trained["tmp"], trained["cfgs"], trained["frames"]
    test_ids = set(np.load(tmp / "shards" / "leader" / "test" / "ids.npy").tolist())
    telco = frames["telco"]
    customer = next(t for t, i in zip(telco["cust"], ids64(telco["cust"]).tolist()) if i in test_ids)
    key = int(ids64(telco["cust"][telco["cust"] == customer]).tolist()[0])
    port, http = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    procs = Procs()
    answers = []
    try:
        _serve_follower(procs, cfgs["telco"], endpoint, str(tmp / "f0.out"))
        procs.start_argv("leader", [sys.executable, "-m", "leader", "serve", "--config", cfgs["leader"], "--bind",
                                    endpoint, "--http", f"127.0.0.1:{http}"], log=str(tmp / "l.out"))  # fmt: skip
        procs.wait_for_line("leader", str(tmp / "l.out"), "scoring on", timeout=90)
        # Execute: 1024 copies in one request; then the same after each of two kill -9 restarts of the follower
        for life in range(3):
            if life:
                os.killpg(procs.procs["telco"].pid, signal.SIGKILL)
                procs.procs["telco"].wait(timeout=10)
                _serve_follower(procs, cfgs["telco"], endpoint, str(tmp / f"f{life}.out"))
                procs.wait_for_line("telco", str(tmp / f"f{life}.out"), "serving the leader", timeout=90)
            status, doc = _post(http, {"ids": [customer] * 1024, "deadline_ms": 20000})
            assert status == 200, doc
            answers.append(doc["scores"])
        os.killpg(procs.procs["leader"].pid, signal.SIGTERM)
        assert procs.procs["leader"].wait(timeout=30) == 0
        assert procs.procs["telco"].wait(timeout=30) == 0
    finally:
        procs.cleanup()
    # Execute: two batch predictions of rows that include the customer
    rows = {p: frames[p][frames[p]["cust"].isin([customer])] for p in ("leader", "telco")}
    predicted = [
        simulate_predict(
            cfgs["leader"],
            [cfgs["telco"]],
            rows,
            run=str(tmp / "out"),
            data=str(tmp / "shards"),
            keys=str(tmp / "keys"),
            out=str(tmp / f"predict{i}"),
        )  # fmt: skip
        for i in range(2)
    ]
    # Assert: every one of the 3 x 1024 served scores is the same number, bit for bit; the predictions are one
    # number too, equal to serving's (prediction runs torch, serving ONNX: the leader's own part differs in float
    # rounding only)
    served = {s for scores in answers for s in scores}
    assert len(served) == 1, sorted(served)[:5]
    scores = [float(p["score"].iloc[0]) for p in predicted]
    assert scores[0] == scores[1]
    np.testing.assert_allclose(scores[0], served.pop(), atol=1e-6, rtol=0)
    # the follower's send ledger (opened with its own key) holds one release of the customer in the model's scope
    from privacy.embedding_ledger import SendLedger, marker_path
    from privacy.embedding_noise import ledger_key
    from vfl.session.cut_release import follower_secret

    secret_file = str(tmp / "keys" / "telco.key_secret")
    ledger = SendLedger(str(tmp / "keys" / "telco.embedding_dp"), ledger_key(follower_secret(secret_file)),
                        marker_path(secret_file))  # fmt: skip
    (model,) = [s for s in ledger.scopes if s.startswith("model/")]
    assert len(ledger.scopes[model].digests["id"][key]) == 1 and ledger.most(model) == 1
    # serving's and prediction's own reports: one release of the most-released id, within the target eps, and
    # its composition with the training sends
    served_rep = json.load(open(tmp / "out" / "telco_serve_embedding_dp.json"))
    predict_rep = json.load(open(tmp / "predict1" / "telco_predict_embedding_dp.json"))
    for rep in (served_rep, predict_rep):
        assert rep["scope"] == model and rep["most_sends_of_a_row"] == 1
        assert rep["eps_spent_by_most_sent_row"] <= EDP["eps"] + 1e-9 < rep["eps_with_training"]
