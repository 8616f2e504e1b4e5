"""The range digest that EVAL and PREDICT_ROWS carry (vfl/session/cut_digest.py): it names exactly the ids of its rows,
cannot be echoed from the follower's own HELLO, and a follower predicting refuses a PREDICT_ROWS whose digest does
not name its ids, before it computes or sends a cut."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vfl.data.manifest import id_digest
from vfl.data.shards import batch_digest
from vfl.session.cut_digest import SCOPES, range_digest
from vfl.wire import WireError
from vfl.wire.predict_messages import PredictCut, PredictRows

IDS = np.sort(np.random.default_rng(3).choice(2**62, size=64, replace=False).astype(np.int64))


def test_the_same_rows_give_the_same_32_hex_digits_on_both_sides():
    # Prepare: the leader's ids as int64, the follower's as an int64 view of another dtype's buffer
    theirs = IDS.astype(">i8")  # another byte order: the ids, not their bytes, are named
    # Execute
    ours, got = range_digest("valid", 8, 24, IDS[8:24]), range_digest("valid", 8, 24, theirs[8:24])
    # Assert
    assert ours == got and len(ours) == 32 and all(c in "0123456789abcdef" for c in ours)


@pytest.mark.parametrize(
    "change",
    ["one id", "one id more", "ids swapped", "another scope", "another start", "another stop"],
)
def test_any_other_ids_order_scope_or_range_gives_another_digest(change):
    # Prepare
    ids, scope, start, stop = IDS[8:24].copy(), "valid", 8, 24
    if change == "one id":
        ids[5] += 1
    elif change == "one id more":
        ids, stop = IDS[8:25], 25
    elif change == "ids swapped":
        ids[[0, 1]] = ids[[1, 0]]
    elif change == "another scope":
        scope = "test"
    elif change == "another start":
        start, stop = 9, 25
    else:
        start, stop = 7, 23
    # Execute / Assert
    assert range_digest(scope, start, stop, ids) != range_digest("valid", 8, 24, IDS[8:24])


@pytest.mark.parametrize("scope", SCOPES)
def test_a_whole_split_range_is_not_the_hello_digest_a_leader_could_echo(scope):
    """HELLO announces SHA-256 of each split's ids in ascending order; the digest of the range of every row must
    differ from its first 32 hex digits (and from FORWARD's bare batch digest of the same ids), or a leader that
    knows no id could name the whole split by echoing the follower's own HELLO."""
    # Execute
    got = range_digest(scope, 0, IDS.size, IDS)
    # Assert
    assert got != id_digest(IDS)[:32] and got != batch_digest(IDS)
    assert id_digest(IDS)[:32] == batch_digest(IDS)  # the power of this test: without the header they would be equal


@pytest.mark.parametrize(
    "scope, start, stop, n, needle",
    [
        ("eval", 0, 4, 4, "scope must be one of ('train', 'valid', 'test', 'predict'), got 'eval'"),
        ("valid", 4, 4, 0, "range 4..4 must be non-empty"),
        ("valid", -1, 3, 4, "range -1..3 must be non-empty, from 0"),
        ("valid", 0, 4, 3, "hold len(ids)=3 rows"),
    ],
)
def test_a_bad_scope_or_range_is_refused_in_one_line(scope, start, stop, n, needle):
    # Execute / Assert
    with pytest.raises(ValueError) as e:
        range_digest(scope, start, stop, IDS[:n])
    assert needle in str(e.value) and "\n" not in str(e.value)


class _Split:
    """The intersection as the handler reads it: its ids and its length."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)


class _Posts:
    """A channel that keeps what the follower posts."""

    def __init__(self):
        self.posted = []

    def post(self, message) -> None:
        self.posted.append(message)


def _follower_predicting(ids: np.ndarray):
    """A FollowerPredictor's request handler over `ids` as its intersection, with a bottom whose cut is the ids'
    first 2 columns of ones (the handler's checks are under test, not the model)."""
    import torch

    from vfl.inference.predict_follower import FollowerPredictor

    f = object.__new__(FollowerPredictor)
    f.rows = SimpleNamespace(split=_Split(ids))
    f.batch_rows, f.requests, f.rows_sent, f.ch = 16, 0, 0, _Posts()
    f.computed = []
    f.cut = lambda start, stop: f.computed.append((start, stop)) or torch.ones(stop - start, 2)
    return f


def test_a_predict_rows_naming_its_ids_is_answered_with_their_cut():
    # Prepare
    f = _follower_predicting(IDS)
    # Execute
    f._on_rows(PredictRows(start=16, stop=32, digest=range_digest("predict", 16, 32, IDS[16:32])))
    # Assert
    (cut,) = f.ch.posted
    assert isinstance(cut, PredictCut) and (cut.start, cut.stop, cut.cut.shape) == (16, 32, (16, 2))


@pytest.mark.parametrize("forged", ["other ids", "bare batch digest", "hello echo", "another scope"])
def test_a_predict_rows_not_naming_its_ids_gets_no_cut(forged):
    """A leader that cannot name the ids of the rows it asks for (a forged match: ids it does not hold) gets a
    one-line refusal, and the follower computes nothing for them."""
    # Prepare: the intersection is one request long, so a HELLO-style digest of all of it could be echoed
    ids = IDS[:16]
    f = _follower_predicting(ids)
    digest = {
        "other ids": range_digest("predict", 0, 16, IDS[16:32]),
        "bare batch digest": batch_digest(ids),
        "hello echo": id_digest(ids)[:32],
        "another scope": range_digest("test", 0, 16, ids),
    }[forged]
    # Execute / Assert
    with pytest.raises(WireError, match=r"^PREDICT_ROWS 0..16: the ids' digest differs from the leader's") as e:
        f._on_rows(PredictRows(start=0, stop=16, digest=digest))
    assert "\n" not in str(e.value) and f.ch.posted == [] and f.computed == []
