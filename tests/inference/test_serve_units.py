"""Online scoring without processes: what a follower receives while serving does not depend on the leader's model or
labels (with a power test: a planted leak of the scores is caught); the follower's rate limit and id log; the HTTP
request's checks; the serving messages' domains."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from tests.support.serve_in_memory import CUT, _leader_model, _RecordingChannel, _Table
from vfl.inference.serve.follower import FollowerServer, IdLog, IdLogFull, ServeLimits, TokenBucket
from vfl.inference.serve.http_endpoint import parse_request
from vfl.inference.serve.leader import ScoringWorker, ServeError
from vfl.wire.serve_messages import ServeCut, ServeIds, ServeRefused


class _ScoresAsIds(ScoringWorker):
    """A planted leak: after each batch the leader also sends the follower the scores (as ids)."""

    def _score(self, batch):
        super()._score(batch)
        scores = [s for r in batch for s in r.future.result().scores]
        self.ch.post("f", ServeIds(10**6, (np.array(scores) * 1e6).astype(np.int64), 1))


class _ScoreInDeadline(ScoringWorker):
    """A planted leak in a field the follower receives anyway: the previous request's first score in deadline_ms."""

    last = 0.5

    def _post(self, f, message):
        if isinstance(message, ServeIds):
            message = ServeIds(message.request, message.ids, 1 + int(self.last * 4000))
        super()._post(f, message)

    def _score(self, batch):
        super()._score(batch)
        first = batch[0].future.result().scores[0]
        self.last = first if first is not None else 0.5


def _follower_view(top_seed: int, worker_class=ScoringWorker) -> tuple[list, list]:
    """(every message the follower received, whole: type, fields and tensors; the scores the client got) for a fixed
    sequence of requests. The worker's clock stands still, so a request's deadline_ms is its full 5000 ms (the
    time spent in the leader's queue is no function of the model) and no keepalive depends on the machine's load."""
    ch = _RecordingChannel()
    worker = worker_class(ch, ["f"], {"f": CUT}, _leader_model(top_seed), _Table(1), None, 64, clock=lambda: 0.0)
    worker.start()
    scores = []
    for ids in ([3], [5, 7, 11], list(range(40, 90)), [2, 200]):
        scores.append(worker.submit(np.array(ids), 5.0).result(timeout=10).scores)
    worker.stop()
    view = []
    for m in ch.sent:
        meta, tensors = m.to_wire()
        view.append((m.TYPE, meta, [(t.dtype.str, t.shape, t.tobytes()) for t in map(np.asarray, tensors)]))
    return view, scores


def test_a_followers_view_of_serving_does_not_depend_on_the_leaders_model_or_labels():
    # Prepare / Execute: the same requests scored by two leaders whose tops differ (as if trained on other labels)
    view_a, scores_a = _follower_view(top_seed=1)
    view_b, scores_b = _follower_view(top_seed=2)
    # Assert: the scores differ, every message the follower received (type, fields, tensors) does not; it is the
    # ids asked about that the leader holds and the requests' deadlines, nothing else
    assert scores_a != scores_b
    assert view_a == view_b
    assert [(v[0], v[1]["request"], v[1]["deadline_ms"]) for v in view_a] == [
        ("SERVE_IDS", n, 5000) for n in (1, 2, 3, 4)
    ]
    assert np.frombuffer(view_a[1][2][0][2], np.int64).tolist() == [5, 7, 11]
    assert np.frombuffer(view_a[3][2][0][2], np.int64).tolist() == [
        2
    ]  # id 200, unknown to the leader, is asked of no follower


@pytest.mark.parametrize("leak", [_ScoresAsIds, _ScoreInDeadline])
def test_the_follower_view_comparison_catches_a_planted_leak_of_the_scores(leak):
    # Prepare / Execute: a leader that also sends the scores, in a message of their own or in a field of SERVE_IDS
    view_a, _ = _follower_view(top_seed=1, worker_class=leak)
    view_b, _ = _follower_view(top_seed=2, worker_class=leak)
    # Assert: the views differ, so the check above has the power to see such a leak
    assert view_a != view_b


def test_an_id_unknown_to_the_leader_gets_no_score_and_the_reason():
    view, scores = _follower_view(top_seed=1)
    assert scores[-1][1] is None and scores[-1][0] is not None


def test_the_follower_rate_limits_and_logs_every_request_asked(tmp_path):
    # Prepare: a follower answering 50 ids/s on a clock the test moves (burst 64: one request of --max-rows fits)
    now = [0.0]
    table = _Table(2)
    bottom = _leader_model(1).bottom
    log = IdLog(str(tmp_path / "ids.log"), budget_bytes=10**6)
    server = FollowerServer(bottom, table, 2, ServeLimits(max_rows=64, rows_per_s=50), log, clock=lambda: now[0])
    # Execute: 40 ids, 40 more at once, the same 40 a second later; 65 ids (over --max-rows)
    first = server.answer(ServeIds(1, np.arange(40), 1000))
    second = server.answer(ServeIds(2, np.arange(40, 80), 1000))
    now[0] = 1.0
    third = server.answer(ServeIds(3, np.arange(40, 80), 1000))
    big = server.answer(ServeIds(4, np.arange(65), 1000))
    log.close()
    # Assert: the second waits for its tokens (16 of 40 missing at 50/s: 320 ms); every request is logged, an
    # answered one with its ids, a refused one with their count and digest
    assert isinstance(first, ServeCut) and first.cut.shape == (40, 2) and first.unknown.size == 0
    assert isinstance(second, ServeRefused) and second.retry_ms == 320 and "50 ids/s" in second.reason
    assert isinstance(third, ServeCut)
    assert isinstance(big, ServeRefused) and "--max-rows 64" in big.reason
    lines = open(tmp_path / "ids.log").read().splitlines()
    assert [line.split()[1:4] for line in lines] == [
        ["request=1", "rows=40", "answered"],
        ["request=2", "rows=40", "refused:rate"],
        ["request=3", "rows=40", "answered"],
        ["request=4", "rows=65", "refused:max_rows"],
    ]
    assert lines[2].endswith(" ids=" + ",".join(map(str, range(40, 80))))
    digest = hashlib.blake2b(np.arange(40, 80, dtype="<i8").tobytes(), digest_size=8).hexdigest()
    assert lines[1].endswith(f" ids_blake2b64={digest}")


def test_the_id_log_is_bounded_refused_floods_cost_little_it_rotates_and_stops_at_its_budget(tmp_path):
    # Prepare: a follower answering 1 id/s whose id logs may take 20 kB, rotated every 4 kB
    path = str(tmp_path / "ids.log")
    log = IdLog(path, budget_bytes=20_000, rotate_bytes=4_000)
    limits = ServeLimits(max_rows=16, rows_per_s=1.0)
    server = FollowerServer(_leader_model(1).bottom, _Table(2), 2, limits, log, clock=lambda: 0.0)
    flood = np.full(8192, -(2**63) + 1, np.int64)  # the most ids a SERVE_IDS carries, the longest in text
    server.bucket.tokens = 0.0  # (its clock stands still: no id is answered until the bucket is replaced)
    # Execute: 100 refused requests of 8192 ids (over --max-rows, and over the rate); then answered ones until the
    # budget is spent
    refused = [server.answer(ServeIds(n, flood if n % 2 else flood[:16], 1000)) for n in range(100)]
    server.bucket = TokenBucket(1e9, 1e9, clock=lambda: 0.0)
    answered = 0
    with pytest.raises(IdLogFull, match="--id-log-mb 0.02"):
        while True:
            server.answer(ServeIds(1000 + answered, np.arange(16), 1000))
            answered += 1
    log.close()
    # Assert: the refused requests took ~100 bytes each (not 8192 ids' 160 kB); the logs stayed within the budget in
    # files of at most 4 kB; the request that did not fit was neither logged nor answered
    assert all(isinstance(r, ServeRefused) for r in refused)
    files = sorted(tmp_path.glob("ids.log*"))
    sizes = [f.stat().st_size for f in files]
    assert len(files) > 3 and max(sizes) <= 4_000 and 20_000 - 200 < sum(sizes) <= 20_000
    text = "".join(f.read_text() for f in files)
    assert text.count("refused:") == 100 and text.count("answered") == answered == server.answered > 0
    assert f"request={1000 + answered} " not in text
    # a follower started again in the same place finds the budget spent
    with pytest.raises(IdLogFull):
        IdLog(path, budget_bytes=20_000, rotate_bytes=4_000).write(1, np.arange(16), "answered unknown=0")


def test_token_bucket_never_lets_more_than_rate_times_time_plus_burst():
    # Prepare: 100 units/s, burst 10; requests of 7 every 10 ms for 10 s
    now = [0.0]
    bucket = TokenBucket(100, 10, clock=lambda: now[0])
    taken = 0
    for _ in range(1000):
        taken += 7 if bucket.take(7) == 0 else 0
        now[0] += 0.01
    # Assert: at most rate x time + burst
    assert 900 <= taken <= 100 * 10 + 10


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"not json", 400, "not JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"ids": []}).encode(), 400, "non-empty list"),
        (json.dumps({"ids": list(range(9))}).encode(), 413, "at most 8"),
        (json.dumps({"ids": [1], "deadline_ms": 0}).encode(), 400, "deadline_ms must be"),
        (json.dumps({"ids": [1], "deadline_ms": True}).encode(), 400, "deadline_ms must be"),
        (json.dumps({"ids": [True]}).encode(), 400, "an id must be"),
        (json.dumps({"ids": [1.5]}).encode(), 400, "an id must be"),
        (json.dumps({"ids": [1], "deadline": 5}).encode(), 400, "unknown key 'deadline'"),
    ],
)
def test_a_bad_request_is_refused_with_its_reason(body, status, words):
    with pytest.raises(ServeError, match=words) as e:
        parse_request(body, max_rows=8, default_deadline_ms=100)
    assert e.value.status == status


@pytest.mark.parametrize("key", ["deadline_ms", "\U0001f600" * 60_000])
def test_a_refusal_echoes_at_most_80_characters_of_a_long_key_or_value(key):
    # Prepare: a 240 KB string as the deadline, or as an unknown key (each emoji escapes to 12 characters)
    doc = {"ids": [1], key: "\u00e9" * 60_000} if key == "deadline_ms" else {"ids": [1], key: 1}
    # Execute
    with pytest.raises(ServeError) as e:
        parse_request(json.dumps(doc, ensure_ascii=False).encode(), max_rows=1024, default_deadline_ms=100)
    # Assert: refused, its reason a line of at most 80 echoed characters (was the whole value, escaped: 3x the body)
    assert e.value.status == 400 and len(str(e.value)) < 160, str(e.value)[:200]


def test_ids_are_read_as_the_party_files_hold_them():
    from vfl.data.ids import ids64

    given, ids, deadline = parse_request(json.dumps({"ids": [42, "42", "cust-7"]}).encode(), 8, 100)
    assert ids.tolist() == [42, 42, int(ids64(["cust-7"])[0])] and deadline == 100 and given[2] == "cust-7"


def test_serving_messages_round_trip_and_refuse_malformed_fields():
    from vfl.wire.frames import decode, encode
    from vfl.wire.messages import parse

    def wire(msg, **meta_changes):
        meta, tensors = msg.to_wire()
        return decode(encode(msg.TYPE, "f", "run", 0, {**meta, **meta_changes}, tensors), "f")

    cut = ServeCut(3, np.ones((4, 2), np.float32), np.array([1, 3], np.int64))
    ids = ServeIds(3, np.arange(4, dtype=np.int64), 250)
    assert parse(wire(cut)) == cut and parse(wire(ids)) == ids
    bad_unknown = ServeCut(3, np.ones((4, 2), np.float32), np.array([3, 1], np.int64))
    with pytest.raises(Exception, match="strictly increasing positions below 4"):
        parse(wire(bad_unknown))
    with pytest.raises(Exception, match="must hold the 5 ids"):
        parse(wire(ids, rows=5))
    with pytest.raises(Exception, match="deadline_ms"):
        parse(wire(ids, deadline_ms=0))


def test_requests_batched_together_get_the_scores_each_gets_alone():
    # Prepare: one leader; 30 requests of 1..12 ids
    rng = np.random.default_rng(4)
    requests = [rng.choice(120, size=rng.integers(1, 13), replace=False) for _ in range(30)]
    ch = _RecordingChannel()
    worker = ScoringWorker(ch, ["f"], {"f": CUT}, _leader_model(1), _Table(1), None, max_rows=64)
    worker.start()
    # Execute: all submitted at once (the worker batches what is queued), then each alone
    together = [worker.submit(ids, 5.0) for ids in requests]
    together = [f.result(timeout=10) for f in together]
    alone = [worker.submit(ids, 5.0).result(timeout=10) for ids in requests]
    worker.stop()
    # Assert: same scores and the same missing ids (ids >= 100 are unknown to the leader), request by request
    assert len(ch.sent) < 2 * len(requests)  # some requests did share a batch
    for a, b, ids in zip(together, alone, requests):
        assert a.missing == b.missing == {j: "unknown to the leader" for j, i in enumerate(ids) if i >= 100}
        assert np.allclose(
            [s if s is not None else -1 for s in a.scores], [s if s is not None else -1 for s in b.scores], atol=1e-6
        )


class _TwoFollowers:
    """The leader's channel to followers a (cut 3) and b (cut 2); b lacks ids >= 50; a answers after b each time."""

    def __init__(self):
        self.timeout_s, self.alive, self.answers = 1.0, {"a", "b"}, {"a": [], "b": []}

    def post(self, peer, msg):
        if not isinstance(msg, ServeIds):
            return
        width = 3 if peer == "a" else 2
        cut = np.stack([np.cos(msg.ids * (k + 2.0)) for k in range(width)], 1).astype(np.float32)
        unknown = np.flatnonzero(msg.ids >= 50) if peer == "b" else np.zeros(0, np.int64)
        cut[unknown] = 0.0
        self.answers[peer].append(ServeCut(msg.request, cut, unknown.astype(np.int64)))

    def expect(self, peer, *classes, what=None):
        return self.answers[peer].pop(0)

    def forget(self, peer):
        pass


def test_two_followers_cuts_are_joined_in_config_order_and_each_missing_id_is_named():
    from vfl.data.task import Task
    from vfl.inference.party_model import scorer
    from vfl.models.mlp import LinearTop
    from vfl.models.wide_deep import WideDeepBottom

    # Prepare: a leader whose top reads its cut (2), a's (3) and b's (2)
    torch.manual_seed(0)
    bottom, top = WideDeepBottom([5, 5], 2, 4, (8,), 2).eval(), LinearTop(7).eval()
    top.target = (0.0, 1.0)
    model, table = scorer(bottom, top, Task("binary")), _Table(3)
    ch = _TwoFollowers()
    worker = ScoringWorker(ch, ["a", "b"], {"a": 3, "b": 2}, model, table, None, max_rows=64)
    worker.start()
    ids = np.array([4, 60, 120, 9])
    # Execute
    got = worker.submit(ids, 5.0).result(timeout=10)
    worker.stop()
    # Assert: scores of the known ids as the model computes them from [leader, a, b]; why the others have none
    cut_a = np.stack([np.cos(ids * (k + 2.0)) for k in range(3)], 1).astype(np.float32)
    cut_b = np.stack([np.cos(ids * (k + 2.0)) for k in range(2)], 1).astype(np.float32)
    with torch.no_grad():
        own = bottom(*table.features(table.rows_of(ids)))
        want = model.head(own, torch.from_numpy(np.concatenate([cut_a, cut_b], 1))).numpy()
    assert got.missing == {1: "unknown to b", 2: "unknown to the leader"}
    assert got.scores[1] is None and got.scores[2] is None
    assert np.allclose([got.scores[0], got.scores[3]], want[[0, 3]], atol=1e-6)


def test_the_serving_leader_accepts_from_a_follower_one_batchs_cut_and_no_more():
    from vfl.wire.frames import encode
    from vfl.wire.serve_messages import ServeHello, follower_message_bytes

    def size(msg) -> int:
        return sum(memoryview(f).nbytes for f in encode(msg.TYPE, "b", "r" * 32, 7, *msg.to_wire()))

    # Prepare: batches of 1024 ids, followers cutting 2 and 3 values; before the handshake, a SERVE_HELLO
    limit = follower_message_bytes(1024, {"a": 2, "b": 3})
    full = ServeCut(7, np.ones((1024, 3), np.float32), np.arange(1024, dtype=np.int64))
    rows = 1024 + (1 << 16) // (4 * 3 + 8) + 1  # a cut of more rows than the batch and a header's room allow
    over = ServeCut(7, np.ones((rows, 3), np.float32), np.arange(rows, dtype=np.int64))
    hello = ServeHello("b" * 32, "b" * 64, 5, "a" * 64, 10**15, "f" * 128, 4096, 86400.0, 8192, 1e12)
    # Execute / Assert: the widest cut of a full batch (every id unknown) fits, a larger one does not; the limit is
    # one batch's cut and a header (< 90 kB), not the 268 MB of MAX_SERVE_ROWS x MAX_CUT_DIM
    assert size(full) <= limit < size(over) and limit < 90_000
    assert size(hello) <= follower_message_bytes(0, {}) < 70_000
