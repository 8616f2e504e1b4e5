"""What a follower sees of a batch prediction (every message, byte for byte, and its PSI's intersection), in this
process over the in-memory channel pair: independent of the leader's labels and scores; the leader's window of
ranges in flight and its logged round trips."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.predict_run import leader_config_with
from tests.support.predict_views import follower_view, view_files


def test_a_follower_view_with_psi_does_not_depend_on_the_leaders_labels_or_scores(trained, tmp_path, monkeypatch):
    """The follower's full view of a prediction, PSI included (every message the leader sends it, byte for byte, and
    the intersection its PSI gives it) is the same whether the leader's file carries its labels as they are, flipped
    with some blank or invalid (an outcome not known yet) under another top model (every score changes), or no label
    column at all: a row is never dropped for its label. The rows with a blank or invalid label are scored and only
    leave the metrics. Power: a planted leak of a score in PREDICT_DONE, and a planted drop of the rows with an
    invalid label before PSI (the reader's old behaviour), each change the view."""
    # Prepare
    from vfl.data import frozen
    from vfl.data.ids import ids64

    files = view_files(trained, tmp_path)
    want = np.sort(ids64(np.intersect1d(files["ids"]["leader"], files["ids"]["follower"])))

    def run(name, label_file, **kw):
        return follower_view(trained, tmp_path / name, monkeypatch, files[label_file], files["follower"], **kw)

    # Execute
    view_a, common_a, scores_a, report_a = run("a", "as_is")
    view_b, common_b, scores_b, report_b = run("b", "varied", perturb_top=True)
    view_c, common_c, _, report_c = run("c", "no_label")
    _, _, _, report_bad = run("bad", "malformed")
    leak_a, *_ = run("leak_a", "as_is", leak=True)
    leak_b, *_ = run("leak_b", "varied", perturb_top=True, leak=True)
    read = frozen.FrozenTransforms.read

    def drop_invalid_labels(self, *args, **kw):  # the planted label-dependent drop
        for block in read(self, *args, **kw):
            if block.label_valid is not None:
                k = block.label_valid
                block = frozen.NewBlock(*(None if v is None else v[k] for v in vars(block).values()))
            yield block

    monkeypatch.setattr(frozen.FrozenTransforms, "read", drop_invalid_labels)
    view_drop, common_drop, _, _ = run("drop", "varied", perturb_top=True)
    # Assert: the scores differ everywhere, the follower's views and intersections do not
    assert np.abs(scores_a - scores_b).min() > 0
    assert {t for t, _, _ in view_a} == {
        "PREDICT_WELCOME", "PSI", "PREDICT_ROWS", "PREDICT_DONE", "LINK_PROBE", "LINK_REPORT"
    }  # fmt: skip
    assert view_a == view_b == view_c
    assert np.array_equal(common_a, want) and np.array_equal(common_b, want) and np.array_equal(common_c, want)
    # every row held by both (raw rows 100..299) is scored; the metrics leave out the 20 blank and 25 invalid labels
    # among them
    assert report_a["rows_scored"] == report_b["rows_scored"] == report_c["rows_scored"] == want.size
    assert report_a["rows_evaluated"] == want.size and report_a["rows_without_valid_label"] == 0
    assert report_b["rows_without_valid_label"] == 45 and report_b["rows_evaluated"] == want.size - 45
    assert set(report_b["metrics"]) == {"auc", "logloss"} and "metrics" not in report_c
    # rows refused for a malformed feature count among the rows without a score (5 of them, 2 held by both)
    assert report_bad["rows_in_file"] == 300 and report_bad["bad_rows_skipped"] == 5
    assert report_bad["rows_scored"] == want.size - 2 and report_bad["rows_without_score"] == 300 - want.size + 2
    # Assert (power): a leaked score, and a label-dependent drop, each show in the follower's view
    assert leak_a != leak_b
    assert view_drop != view_b and common_drop.size == want.size - 45


def test_the_leader_asks_for_a_window_of_ranges_before_the_first_cut_returns(trained, tmp_path, monkeypatch):
    """Prediction streams: PREDICT_WINDOW ranges are out before the leader awaits the first cut, and never more, so a
    long round trip is paid a few times, not once a range (the scores are the same: test above)."""
    # Prepare: ranges of 16 rows; the in-memory leader channel records what the leader posts and awaits
    from leader.predictor import PREDICT_WINDOW
    from tests.support import memory_channels as memory

    log = []

    class Recording(memory.MemoryLeaderChannel):
        def post(self, peer, message):
            log.append(("post", message.TYPE))
            super().post(peer, message)

        def expect(self, peer, *classes, what=None):
            msg = super().expect(peer, *classes, what=what)
            log.append(("recv", msg.TYPE))
            return msg

    monkeypatch.setattr(memory, "MemoryLeaderChannel", Recording)
    small = leader_config_with(trained, tmp_path, eval_batch_size=16)
    files = view_files(trained, tmp_path)
    # Execute
    _, _, scores, report = follower_view(small, tmp_path / "w", monkeypatch, files["as_is"], files["follower"])
    # Assert: the window before the first cut, then one range asked per cut received
    events = [e for e in log if e[1] in ("PREDICT_ROWS", "PREDICT_CUT")]
    ranges = -(-report["rows_scored"] // 16)
    assert ranges > PREDICT_WINDOW and len(scores) == report["rows_scored"]
    assert events[:PREDICT_WINDOW] == [("post", "PREDICT_ROWS")] * PREDICT_WINDOW
    assert events[PREDICT_WINDOW] == ("recv", "PREDICT_CUT")
    out = [sum(1 if k == "post" else -1 for k, _ in events[: i + 1]) for i in range(len(events))]
    assert max(out) == PREDICT_WINDOW and out[-1] == 0 and events.count(("post", "PREDICT_ROWS")) == ranges


def test_batch_prediction_logs_each_followers_round_trip_as_serving_does(trained, tmp_path, monkeypatch):
    """The leader times each follower's round trip at its PREDICT_HELLO and logs it as serving does at SERVE_HELLO,
    and predict.json keeps it (docs/deploy-wan.md)."""
    # Prepare
    import re

    files = view_files(trained, tmp_path)
    # Execute
    _, _, _, report = follower_view(trained, tmp_path / "view", monkeypatch, files["as_is"], files["follower"])
    # Assert
    log = (tmp_path / "view" / "view.log").read_text()
    assert re.search(r"leader leader: link to follower0: RTT \d+\.\d\d ms \(timed at its PREDICT_HELLO\)", log), log
    assert report["links"]["follower0"]["rtt_ms"] > 0
    assert report["psi"]["wait_seconds"] + report["psi"]["work_seconds"] == pytest.approx(
        report["psi"]["seconds"], abs=2e-3
    )
