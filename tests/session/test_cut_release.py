"""A follower's cut releases (vfl/session/cut_release.py): off is the cut bit for bit; on, cuts are keyed-noised and
charged to the send ledger before they leave, the schedule is calibrated at the handshake, and a leader that asks for
one customer again and again (in one request, across restarts, through prediction) averages nothing away.

The averaging attack is statistical: seeded where it draws, with its false-failure bound in its docstring; its power
test plants the leak this module closes (fresh noise per send) and must fail the same check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import zmq.auth

from vfl.config.schema import EmbeddingDPConfig
from vfl.session.cut_release import CutRelease, ReleaseCapError, weights_digest
from vfl.wire import WireError


@pytest.fixture
def key_file(tmp_path) -> str:
    _, secret = zmq.auth.create_certificates(str(tmp_path), "follower0")
    return secret


def _release(key_file, **dp) -> CutRelease:
    cfg = EmbeddingDPConfig(**{"eps": 4.0, "delta": 1e-5, "clip": 1.0, **dp})
    return CutRelease(cfg, 4, log=lambda s: None, party="follower0", secret_key_file=key_file)


def test_off_the_release_is_the_cut_bit_for_bit_and_the_gradient_unchanged():
    rel = CutRelease(None, 4)
    cut, grad = torch.randn(6, 4), torch.randn(6, 4)
    assert np.array_equal(rel.release(cut, "train", 10, np.arange(6)), cut.numpy())
    assert rel.grad_for_cut(cut, grad) is grad
    assert rel.report() is None


def test_on_without_a_secret_key_file_is_refused_with_one_line():
    with pytest.raises(ValueError, match="needs network.secret_key_file"):
        CutRelease(EmbeddingDPConfig(eps=4.0), 4)


def test_training_sends_are_calibrated_for_the_leaders_schedule_and_charged_per_row(key_file):
    # Prepare: a schedule of 2 epochs, 3 evaluations, a re-test
    rel = _release(key_file)
    rel.plan_training({"train": 2, "valid": 3, "test": 4}, "run-a")
    cut = torch.randn(10, 4) * 10
    # Execute: rows 0-4 twice, then a third send of row 3
    a = rel.release(cut[:5], "train", 10, np.arange(5))
    b = rel.release(cut[:5], "train", 10, np.arange(5))
    # Assert: the cap is the schedule's 4 sends; identical inputs are the same bytes; the count is in the ledger
    assert rel.releases == 4 and np.array_equal(a, b)
    assert rel.ledger.most_in("train/run-a", "train") == 2
    rel.release(cut[:5], "train", 10, np.arange(5))
    rel.release(cut[:5], "train", 10, np.arange(5))
    with pytest.raises(ReleaseCapError, match="released 5 times for this model, over the cap of 4"):
        rel.release(cut[3:4], "train", 10, np.array([3]))
    rep = rel.report()
    assert rep["most_sends_of_a_row"] == 4 and rep["eps"] <= 4.0 + 1e-9 and rep["scope"] == "train/run-a"


def test_a_schedule_past_the_configured_releases_is_refused_at_the_handshake(key_file):
    rel = _release(key_file, releases=2)
    with pytest.raises(ReleaseCapError, match=r"up to 8 times \(train 3, valid 8, test 8\), over .*releases=2"):
        rel.plan_training({"train": 3, "valid": 8, "test": 8}, "run-b")


def test_a_resume_keeps_the_calibration_and_is_refused_when_its_sends_would_pass_it(key_file):
    # Prepare: the first run calibrated for 3 and sent train row 0 twice
    first = _release(key_file)
    first.plan_training({"train": 3, "valid": 1, "test": 1}, "run-c")
    first.release(torch.randn(1, 4), "train", 5, np.array([0]))
    first.release(torch.randn(1, 4), "train", 5, np.array([0]))
    # Execute: a resume (another process) with one epoch to come fits; one with two does not
    resumed = _release(key_file)
    resumed.plan_training({"train": 1, "valid": 1, "test": 1}, "run-c")
    again = _release(key_file)
    # Assert
    assert resumed.multiplier == first.multiplier and resumed.releases == 3
    with pytest.raises(ReleaseCapError, match="resuming would send a row's cut up to 4 times"):
        again.plan_training({"train": 2, "valid": 1, "test": 1}, "run-c")


def test_another_eps_for_the_same_model_is_refused(key_file):
    _release(key_file).plan_training({"train": 1, "valid": 1, "test": 1}, "run-d")
    with pytest.raises(WireError, match="calibrated for eps=4"):
        _release(key_file, eps=2.0).plan_training({"train": 1, "valid": 1, "test": 1}, "run-d")


class _ServedTable:
    """Ids 0..9 with 4 numeric features each (any id outside is unknown)."""

    def __init__(self):
        self.dense = torch.arange(40, dtype=torch.float32).reshape(10, 4) / 40.0

    def rows_of(self, ids):
        ids = np.asarray(ids)
        return np.where((ids >= 0) & (ids < 10), ids, -1)

    def features(self, rows):
        return (self.dense[np.where(rows >= 0, rows, 0)],)


def _server(rel, tmp_path, name="ids.log"):
    from vfl.inference.serve.follower import FollowerServer, IdLog, ServeLimits

    log = IdLog(str(tmp_path / name), budget_bytes=10**7)
    limits = ServeLimits(max_rows=1024, rows_per_s=1e9)
    return FollowerServer(lambda x: x, _ServedTable(), 4, limits, log, cut_release=rel), log


def _averaging_error(key_file, tmp_path, restarts: int) -> tuple[float, float, int]:
    """The red team's attack: 1024 copies of id 3 in one request, then the same after each follower restart (a new
    CutRelease on the same ledger), and a prediction-style release of it; returns (the error of the average of
    every cut received, the error of one send, the ledger's releases of id 3)."""
    from vfl.wire.serve_messages import ServeCut, ServeIds

    truth = _ServedTable().dense[3].numpy()
    received = []
    for life in range(restarts + 1):
        rel = _release(key_file)
        rel.plan_scoring("m" * 32)
        server, log = _server(rel, tmp_path, f"ids{life}.log")
        reply = server.answer(ServeIds(life, np.full(1024, 3), 1000))
        log.close()
        assert isinstance(reply, ServeCut), reply
        received.append(reply.cut)
        received.append(rel.release(torch.from_numpy(truth[None]), "predict", ids=np.array([3])))
    every = np.concatenate(received).astype(np.float64)
    one = float(np.linalg.norm(every[0] - truth))
    return float(np.linalg.norm(every.mean(axis=0) - truth)), one, rel.ledger.most("model/" + "m" * 32)


def test_a_leader_averaging_every_copy_of_one_customer_gains_nothing(key_file, tmp_path):
    """The error of the average of all 3 x 1025 received cuts equals the error of one send (they are one release,
    bit for bit), and the ledger holds one release. No randomness decides it: the check cannot fail by chance."""
    # Execute
    mean_error, one_error, releases = _averaging_error(key_file, tmp_path, restarts=2)
    # Assert: at most sqrt(cap) = 1x lower; one release of the id in the model's scope
    assert mean_error >= one_error / math.sqrt(1) - 1e-6
    assert releases == 1


def test_power_the_same_attack_on_fresh_noise_per_send_averages_the_noise_away(key_file, tmp_path, monkeypatch):
    """Planted leak: fresh OS-seeded noise per send (the mechanism before keyed noise). With 3075 copies and noise std
    s ~ 2.4 per coordinate, the average's error is ~ s * 2 / sqrt(3075) ~ 0.09 against ~ s * 2 for one send; the check
    above (mean error >= one error) fails unless the one send's noise norm is below 0.09, which for a 4-dim Gaussian
    of std 2.4 has probability < 1e-6."""
    import privacy.embedding_noise as noise

    # Prepare: every row of every send gets fresh noise (seeded here), while the ledger sees the same digests
    rng = np.random.default_rng(7)

    def fresh(key, ids, values, std):
        sent = (values + std * rng.standard_normal(values.shape)).astype(np.float32)
        return sent, noise.row_digests(ids, values)

    monkeypatch.setattr("vfl.session.cut_release.keyed_noised", fresh)
    # Execute
    mean_error, one_error, _ = _averaging_error(key_file, tmp_path, restarts=2)
    # Assert: the attack works on the leaky mechanism
    assert mean_error < one_error / 10


def test_a_changed_row_is_a_new_release_refused_past_the_scoring_cap(key_file, tmp_path):
    from vfl.wire.serve_messages import ServeCut, ServeIds, ServeRefused

    # Prepare
    rel = _release(key_file)
    rel.plan_scoring("n" * 32)
    server, log = _server(rel, tmp_path)
    first = server.answer(ServeIds(1, np.array([1, 2, 99]), 1000))
    # Execute: the same ids again, then id 2's features change
    again = server.answer(ServeIds(2, np.array([2, 1]), 1000))
    server.table.dense[2] += 0.5
    changed = server.answer(ServeIds(3, np.array([2]), 1000))
    log.close()
    # Assert: repeats are the first bytes; the changed row is refused with the cap named; unknown ids stay zero
    assert isinstance(first, ServeCut) and isinstance(again, ServeCut) and first.unknown.tolist() == [2]
    assert np.array_equal(again.cut[0], first.cut[1]) and np.array_equal(again.cut[1], first.cut[0])
    assert not np.allclose(first.cut[:2], _ServedTable().dense[[1, 2]].numpy())
    assert np.array_equal(first.cut[2], np.zeros(4, np.float32))
    assert isinstance(changed, ServeRefused) and "over the cap of 1" in changed.reason
    assert "refused:embedding_dp" in open(tmp_path / "ids.log").read()


def test_a_value_a_few_ulps_away_reuses_the_first_release(key_file):
    rel = _release(key_file)
    rel.plan_scoring("o" * 32)
    cut = torch.tensor([[0.1, 0.2, -0.3, 0.05]])
    first = rel.release(cut, "predict", ids=np.array([7]))
    nudged = rel.release(cut + 3e-6, "serve", ids=np.array([7]))  # another engine's last bits
    assert np.array_equal(first, nudged) and rel.ledger.most("model/" + "o" * 32) == 1


def test_scoring_reports_its_eps_composed_with_the_training_lineage(key_file):
    train = _release(key_file)
    train.plan_training({"train": 2, "valid": 2, "test": 2}, "run-e")
    train.release(torch.randn(3, 4), "train", 3, np.arange(3))
    train.release(torch.randn(3, 4), "train", 3, np.arange(3))
    score = _release(key_file)
    score.plan_scoring("p" * 32, "train/run-e")
    score.release(torch.randn(1, 4), "serve", ids=np.array([1]))
    rep = score.report()
    assert rep["most_sends_of_a_row"] == 1 and rep["eps_spent_by_most_sent_row"] <= 4.0 + 1e-9
    assert 4.0 < rep["eps_with_training"] <= 8.0


def test_weights_digest_names_the_weights_not_the_module_object():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert weights_digest(a.state_dict()) == weights_digest(b.state_dict())
    with torch.no_grad():
        b.bias[0] += 1e-6
    assert weights_digest(a.state_dict()) != weights_digest(b.state_dict())


def test_a_resume_whose_rows_moved_is_refused(key_file):
    """A leader that drops one id from a resumed run's PSI would move a row to a position never charged; the
    lineage's calibration records which ids its positions name, so such a resume is refused before any send."""
    first = _release(key_file)
    first.bind_rows("valid", np.arange(10, 20))
    first.plan_training({"train": 1, "valid": 2, "test": 1}, "run-f")
    moved = _release(key_file)
    moved.bind_rows("valid", np.r_[np.arange(10, 14), np.arange(15, 20)])
    with pytest.raises(WireError, match="rows differ from those this model's sends were counted on"):
        moved.plan_training({"train": 1, "valid": 2, "test": 1}, "run-f")


def test_a_welcome_of_no_sends_calibrates_for_one(key_file):
    rel = _release(key_file)
    rel.plan_training({"train": 0, "valid": 0, "test": 0}, "run-g")
    assert rel.releases == 1
