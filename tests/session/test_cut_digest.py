"""The keyed id digests (vfl/session/cut_digest.py): HELLO's per split, FORWARD's batch, EVAL's and PREDICT_ROWS'
range. Under one session's key both sides name the same rows alike; any other ids, order, scope or range gives another
digest; another session's key gives an unrelated one (no dictionary computed before the session, nothing links two
sessions); no kind can be echoed as another; and a follower predicting refuses a PREDICT_ROWS whose digest does not
name its ids, before it computes or sends a cut."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

from vfl.data.manifest import id_digest
from vfl.session.cut_digest import SCOPES, SessionDigests, hello_digests
from vfl.splits import SPLITS
from vfl.wire import WireError
from vfl.wire.predict_messages import PredictCut, PredictRows

IDS = np.sort(np.random.default_rng(3).choice(2**62, size=64, replace=False).astype(np.int64))
RUN, NONCE = "0123456789abcdef" * 2, "fedcba9876543210" * 2
KEYED = SessionDigests(RUN, NONCE)


def _unkeyed(ids: np.ndarray) -> str:
    """Protocol 5's digest (and what a dictionary computed before a session would hold): SHA-256 of the ids alone."""
    return hashlib.sha256(np.ascontiguousarray(ids, "<i8").tobytes()).hexdigest()[:32]


def test_the_same_rows_give_the_same_32_hex_digits_on_both_sides():
    # Prepare: the leader's ids as int64, the follower's as another byte order; each side derives the key itself
    theirs = IDS.astype(">i8")  # another byte order: the ids, not their bytes, are named
    follower = SessionDigests(RUN, NONCE)
    # Execute
    ours, got = KEYED.range("valid", 8, 24, IDS[8:24]), follower.range("valid", 8, 24, theirs[8:24])
    batch = KEYED.batch(IDS[8:24]), follower.batch(theirs[8:24])
    # Assert
    assert ours == got and len(ours) == 32 and all(c in "0123456789abcdef" for c in ours)
    assert batch[0] == batch[1] and len(batch[0]) == 32


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
    assert KEYED.range(scope, start, stop, ids) != KEYED.range("valid", 8, 24, IDS[8:24])


@pytest.mark.parametrize("other", ["another run", "another nonce"])
def test_another_sessions_key_gives_unrelated_digests_of_the_same_ids(other):
    """The key is fresh in every session (the run id hashes the leader's fresh nonce, the HELLO nonce is the
    follower's): a digest computed before or in another session names nothing here, so no party can hold a
    dictionary of digests before the session, and two sessions' digests of the same ids do not link them."""
    # Prepare
    session = SessionDigests("a" * 32, NONCE) if other == "another run" else SessionDigests(RUN, "b" * 32)
    # Execute
    mine, theirs = KEYED.batch(IDS), session.batch(IDS)
    # Assert: unrelated, and neither is protocol 5's unkeyed hash of the ids
    assert mine != theirs and _unkeyed(IDS) not in (mine, theirs)
    assert KEYED.range("predict", 0, 16, IDS[:16]) != session.range("predict", 0, 16, IDS[:16])
    assert SessionDigests(RUN, NONCE).batch(IDS) == mine  # the power of this test: the same session agrees


def test_a_hello_digest_is_keyed_by_its_nonce_and_the_leader_reproduces_it():
    """HELLO's id_digest goes out before the leader's nonce exists: its key is the follower's fresh nonce, which the
    leader learns only with the digest, and which it uses to key its own view of the same splits."""
    # Prepare: three splits of the ids, as a shard after PSI holds them
    splits = {s: IDS[i * 20 : (i + 1) * 20] for i, s in enumerate(SPLITS)}
    # Execute
    follower, leader, other = (
        hello_digests(NONCE, splits),
        hello_digests(NONCE, dict(splits)),
        hello_digests(RUN, splits),
    )
    # Assert
    assert follower == leader and set(follower) == set(SPLITS)
    assert all(follower[s] != other[s] for s in SPLITS)  # another nonce: unrelated digests
    assert all(follower[s] not in (id_digest(splits[s])[:32], _unkeyed(splits[s])) for s in SPLITS)
    assert len(set(follower.values())) == 3


@pytest.mark.parametrize("scope", SCOPES)
def test_a_whole_split_range_is_no_other_digest_a_leader_could_echo(scope):
    """The digest of the range of every row must differ from the batch digest of the same ids under the same key and
    from a HELLO digest of them under the same nonce, or a leader that knows no id could name the whole split by
    echoing a digest the follower sent or checked."""
    # Execute
    got = KEYED.range(scope, 0, IDS.size, IDS)
    # Assert
    assert got not in (KEYED.batch(IDS), *hello_digests(NONCE, dict.fromkeys(SPLITS, IDS)).values())
    assert _unkeyed(IDS) == id_digest(IDS)[:32]  # the power: unkeyed and unheaded, a batch and a split would match


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
        KEYED.range(scope, start, stop, IDS[:n])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_key_without_a_run_id_or_nonce_is_refused():
    # Execute / Assert
    with pytest.raises(ValueError, match="needs the session's run id and the follower's nonce"):
        SessionDigests("", NONCE)


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

    from follower.predictor import FollowerPredictor
    from vfl.session.cut_release import CutRelease

    f = object.__new__(FollowerPredictor)
    f.rows = SimpleNamespace(split=_Split(ids))
    f.batch_rows, f.requests, f.rows_sent, f.ch = 16, 0, 0, _Posts()
    f.digests = SessionDigests(RUN, NONCE)  # the follower's side of the session's key
    f.cut_release = CutRelease(None, 2)  # embedding DP off: the cut leaves as computed
    f.computed = []
    f.cut = lambda start, stop: f.computed.append((start, stop)) or torch.ones(stop - start, 2)
    return f


def test_a_predict_rows_naming_its_ids_is_answered_with_their_cut():
    # Prepare
    f = _follower_predicting(IDS)
    # Execute
    f._on_rows(PredictRows(start=16, stop=32, digest=KEYED.range("predict", 16, 32, IDS[16:32])))
    # Assert
    (cut,) = f.ch.posted
    assert isinstance(cut, PredictCut) and (cut.start, cut.stop, cut.cut.shape) == (16, 32, (16, 2))


@pytest.mark.parametrize(
    "forged", ["other ids", "batch digest", "hello echo", "another scope", "another session", "unkeyed"]
)
def test_a_predict_rows_not_naming_its_ids_gets_no_cut(forged):
    """A leader that cannot name the ids of the rows it asks for (a forged match: ids it does not hold) gets a
    one-line refusal, and the follower computes nothing for them."""
    # Prepare: the intersection is one request long, so a HELLO-style digest of all of it could be echoed
    ids = IDS[:16]
    f = _follower_predicting(ids)
    digest = {
        "other ids": KEYED.range("predict", 0, 16, IDS[16:32]),
        "batch digest": KEYED.batch(ids),
        "hello echo": hello_digests(NONCE, dict.fromkeys(SPLITS, ids))["train"],
        "another scope": KEYED.range("test", 0, 16, ids),
        "another session": SessionDigests("a" * 32, NONCE).range("predict", 0, 16, ids),  # replayed from another run
        "unkeyed": _unkeyed(np.concatenate([[int.from_bytes(b"vflcut\x01\x00", "little"), 3, 0, 16], ids])),
    }[forged]
    # Execute / Assert
    with pytest.raises(WireError, match=r"^PREDICT_ROWS 0..16: the ids' digest differs from the leader's") as e:
        f._on_rows(PredictRows(start=0, stop=16, digest=digest))
    assert "\n" not in str(e.value) and f.ch.posted == [] and f.computed == []
