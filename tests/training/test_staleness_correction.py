"""train.staleness_correction: each correction's update equals its paper's formula on a two-step case.

In memory (DC-ASGD's compensated gradient, Zhang et al.'s lr / tau, CELU-VFL's cosine-weighted local step from a cached cut and
gradient), computed beside it on an identically seeded bottom; and staleness 0 leaves every correction unused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.party_processes import party_configs
from vfl.training.staleness_correction import (
    DC_LAMBDA0,
    DC_MOMENTUM,
    LOCAL_COSINE_FLOOR,
    StaleCorrection,
    cosine_weights,
    delay_compensated,
    staleness_lr_factor,
    update_mean_square,
)
from vfl.training.weight_stash import WeightStash


@pytest.fixture
def bottoms(tmp_path, shards_small):
    """Two fresh, identically seeded follower bottoms (an mlp hidden layer: dense weights that are stashed)."""
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.training.party import BottomParty

    cfgs = party_configs(str(tmp_path), str(shards_small), model={"bottom": {"embedding_dim": 4, "hidden": [8]}})
    cfg = load_config(cfgs["follower0"])
    return [BottomParty(cfg, PartyShard(cfg.data.path), torch.device("cpu")) for _ in range(2)]


def _recording_steps(party) -> list[dict]:
    """Every optimizer step of `party`: its dense gradients and its learning rates, as the step sees them."""
    seen: list[dict] = []
    step = party.optimizer.optimizer.step

    def record() -> None:
        grads = {
            n: p.grad.clone() for n, p in party.model.named_parameters() if p.grad is not None and not p.grad.is_sparse
        }
        lrs = [g["lr"] for o in party.optimizer.optimizer.optimizers for g in o.param_groups]
        seen.append({"grads": grads, "lrs": lrs})
        step()

    party.optimizer.optimizer.step = record
    return seen


def _grads_at(party, rows: np.ndarray, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """The plain dense gradient of <grad, cut(rows)> at `party`'s weights of now (a fresh forward and backward)."""
    cut = party.forward_train(rows)
    party.accumulate_gradient(grad)
    out = {n: p.grad.clone() for n, p in party.model.named_parameters() if p.grad is not None and not p.grad.is_sparse}
    party.optimizer.zero_grad()
    party._pending = []
    return out, cut.detach()


def _two_batches(party):
    gen = torch.Generator().manual_seed(3)
    a, b = np.arange(0, 64), np.arange(64, 128)
    return a, b, torch.randn(64, party.cut_dim, generator=gen), torch.randn(64, party.cut_dim, generator=gen)


def test_delay_compensation_applies_dc_asgd_a_to_the_gradient_of_a_batch_one_update_late(bottoms):
    """Batches A and B forwarded at w0; A's gradient moves the weights to w1; B's stale gradient g_B(w0) is applied as
    g + lambda0 / sqrt(MeanSquare) g g (w1 - w0), MeanSquare = m (1 - m) g_A^2 + (1 - m) g_B^2 (Zheng et al. 2017)."""
    # Prepare: the party with its stash and correction; the reference computes g_A, g_B at w0
    party, reference = bottoms
    a, b, grad_a, grad_b = _two_batches(party)
    stash = WeightStash(party, StaleCorrection("delay_compensation", party, 0))
    steps = _recording_steps(party)
    w0 = {n: p.detach().clone() for n, p in party.model.named_parameters()}
    g_a, _ = _grads_at(reference, a, grad_a)
    g_b, _ = _grads_at(reference, b, grad_b)
    # Execute: both forwarded at w0, A applied, then B
    stash.forward(a)
    stash.forward(b)
    stash.apply(grad_a)
    w1 = {n: p.detach().clone() for n, p in party.model.named_parameters()}
    stash.apply(grad_b)
    # Assert: A's step took g_A itself (no delay: w1 - w0 = 0 there); B's the compensated formula
    first, second = steps
    for n in stash.copied:
        torch.testing.assert_close(first["grads"][n], g_a[n], rtol=1e-5, atol=1e-7)
        ms = update_mean_square(update_mean_square(None, g_a[n], DC_MOMENTUM), g_b[n], DC_MOMENTUM)
        want = g_b[n] + DC_LAMBDA0 / torch.sqrt(ms + 1e-7) * g_b[n] * g_b[n] * (w1[n] - w0[n])
        torch.testing.assert_close(second["grads"][n], want, rtol=1e-5, atol=1e-7)
    # and the formula is not the identity here: the weights moved and the correction is nonzero
    assert any(not torch.equal(second["grads"][n], g_b[n]) for n in stash.copied)


def test_delay_compensation_is_the_formula_elementwise():
    g, now, stale, ms = (torch.tensor([0.5, -2.0]), torch.tensor([1.0, 1.0]), torch.tensor([0.0, 3.0]),
                         torch.tensor([0.25, 4.0]))  # fmt: skip
    got = delay_compensated(g, now, stale, ms, 2.0)
    want = torch.tensor([0.5 + 2.0 / 0.5 * 0.25 * 1.0, -2.0 + 2.0 / 2.0 * 4.0 * -2.0])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_staleness_lr_steps_a_gradient_tau_updates_late_at_lr_over_tau(bottoms):
    """Three batches forwarded at once: A applies with delay 0 (lr), B with 1 (lr / 1), C with 2 (lr / 2), each
    gradient itself unchanged (Zhang et al. 2016)."""
    # Prepare
    party, _ = bottoms
    stash = WeightStash(party, StaleCorrection("staleness_lr", party, 0))
    steps = _recording_steps(party)
    base = [g["lr"] for o in party.optimizer.optimizer.optimizers for g in o.param_groups]
    gen = torch.Generator().manual_seed(4)
    # Execute
    for s in range(3):
        stash.forward(np.arange(64 * s, 64 * (s + 1)))
    for _ in range(3):
        stash.apply(torch.randn(64, party.cut_dim, generator=gen))
    # Assert: lr, lr, lr / 2 (the constant schedule: factor 1), and the schedule counted three updates
    assert [s["lrs"] for s in steps] == [base, base, [x * staleness_lr_factor(2) for x in base]]
    assert staleness_lr_factor(2) == 0.5 and staleness_lr_factor(0) == 1.0
    assert party.optimizer.updates == 3


def test_local_updates_take_a_cosine_weighted_step_from_the_cached_cut_and_gradient(bottoms):
    """After A's gradient is applied (its cut and gradient cached), the local step recomputes A's cut z' at the new
    weights and descends sum_i w_i <g_i, z'_i>, w_i = cos(z_i, z'_i) (0 below the floor): CELU-VFL's instance-weighted
    local update; the lr schedule does not count it."""
    # Prepare: the reference follows the same plain step, then computes the local step's gradient by the formula
    party, reference = bottoms
    a, _, grad_a, _ = _two_batches(party)
    correction = StaleCorrection("local_updates", party, 0)
    stash = WeightStash(party, correction)
    steps = _recording_steps(party)
    # Execute
    cut_a = stash.forward(a).detach().clone()
    stash.apply(grad_a)
    # Assert: two steps (the plain one, then one local), the second by the formula at the weights after the first
    reference.forward_train(a)
    reference.accumulate_gradient(grad_a)
    reference.step_optimizer()
    fresh = reference.forward_train(a)
    weights = cosine_weights(cut_a, fresh.detach(), LOCAL_COSINE_FLOOR)
    (weights[:, None] * grad_a * fresh).sum().backward()
    want = {n: p.grad for n, p in reference.model.named_parameters() if p.grad is not None and not p.grad.is_sparse}
    assert len(steps) == 2 and correction.local_steps == 1 and party.optimizer.updates == 1
    assert 0 < float(weights.min()) and float(weights.max()) <= 1.0 + 1e-6
    for n, g in want.items():
        torch.testing.assert_close(steps[1]["grads"][n], g, rtol=1e-5, atol=1e-7)


def test_cosine_weights_drop_rows_below_the_floor():
    stale = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    fresh = torch.tensor([[2.0, 0.0], [-1.0, 0.1], [1.0, 1.0]])
    assert cosine_weights(stale, fresh, 0.5).tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_an_unknown_correction_is_refused_with_its_domain(bottoms):
    with pytest.raises(ValueError, match=r"train\.staleness_correction must be one of \['none', "):
        StaleCorrection("foo", bottoms[0], 0)


@pytest.mark.parametrize(
    "train, needle",
    [
        ({"staleness_correction": "foo"}, "train.staleness_correction must be one of"),
        ({"staleness": -1}, "train.staleness must be an integer in [0, 16] or 'auto', got -1"),
        ({"staleness": "sometimes"}, "train.staleness must be an integer in [0, 16] or 'auto', got 'sometimes'"),
        ({"staleness_leader_bottom": "old"}, "train.staleness_leader_bottom must be one of ['stale', 'fresh']"),
    ],
)
def test_a_bad_staleness_setting_is_one_line_naming_value_and_domain(tmp_path, shards_small, train, needle):
    from vfl.config.schema import ConfigError, load_config

    cfgs = party_configs(str(tmp_path), str(shards_small), train=train)
    with pytest.raises(ConfigError) as err:
        load_config(cfgs["leader"])
    assert [line for line in str(err.value).splitlines() if needle in line]


def test_a_fresh_leader_bottom_trains_synchronously_while_the_followers_stay_k_behind(tmp_path, shards_small):
    """train.staleness_leader_bottom fresh: the leader keeps no stash (its cut of a batch is computed, and its
    gradient applied, at the batch's own step), while the follower still runs K + 1 batches in flight."""
    from tests.support.memory_session import memory_run

    # Prepare / Execute: staleness 2, 2 epochs of batch 512
    train = {"epochs": 2, "staleness": 2}
    run = memory_run(tmp_path, shards_small, train=train, leader_train={"staleness_leader_bottom": "fresh"})
    # Assert
    assert run["leader"].stash is None and run["leader"].cfg.train.staleness_leader_bottom == "fresh"
    assert run["follower"].in_flight.max_in_flight == 3
    assert len(run["leader"].loop.step_losses) == run["leader"].loop.global_step > 0
