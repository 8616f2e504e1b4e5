"""train.ema_decay: the lazy per-row average equals the full-table one, and checkpoints, restore and resume keep it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from vfl.config.model_sections import TopConfig
from vfl.config.schema import TrainConfig
from vfl.training.optim import ScheduledOptimizer, build_optimizer
from vfl.training.top import TopTrainer
from vfl.training.weight_average import WeightAverage


class _Tiny(nn.Module):
    """A sparse table (lazy rows) and a dense layer (averaged every step)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(40, 3, sparse=True)
        self.out = nn.Linear(3, 1)

    def forward(self, ids):
        return self.out(self.emb(ids).sum(1))


@pytest.mark.parametrize("optimizer, block", [("adam", None), ("sgd", None), ("adam", 7)])
def test_lazy_rows_equal_the_full_table_average(optimizer, block, monkeypatch):
    # Prepare: rows touched irregularly (some every step, some once, rows 30-39 never), two syncs midway; block 7:
    # the syncs bring the table up to date 7 rows at a time (as 65,536 at a time on a large table)
    if block is not None:
        monkeypatch.setattr("vfl.training.weight_average.SYNC_BLOCK_ROWS", block)
    model = _Tiny()
    cfg = TrainConfig(optimizer=optimizer, lr=0.05, ema_decay=0.8)
    opt = ScheduledOptimizer(build_optimizer(model, cfg), cfg, 20)
    opt.average = WeightAverage(model, cfg.ema_decay)
    full = {n: p.detach().double().clone() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(1)
    # Execute
    for step in range(20):
        ids = torch.randint(0, 4 + step, (6, 2), generator=g)  # later steps reach further rows
        opt.zero_grad()
        (model(ids) - 1.0).pow(2).mean().backward()
        opt.step()
        for n, p in model.named_parameters():
            full[n] = 0.8 * full[n] + 0.2 * p.detach().double()
        if step in (6, 13):
            opt.average.sync()
    averaged = dict(opt.average.sync().named_parameters())
    # Assert: every row, touched or not, equals the plain average; untouched rows still equal their start
    for n, want in full.items():
        torch.testing.assert_close(averaged[n].double(), want, rtol=0, atol=1e-6)
    assert torch.equal(averaged["emb.weight"][30:], model.emb.weight[30:])
    assert not torch.allclose(averaged["out.weight"], model.out.weight)


def _trainer(decay=0.9, precision="fp32"):
    tr = TrainConfig(lr=0.05, ema_decay=decay, precision=precision, lr_schedule={"name": "cosine"})
    return TopTrainer(tr, TopConfig(name="mlp", hidden=[8]), 4, torch.device("cpu"), total_steps=30)


def _train(trainer, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        cuts = [torch.randn(16, 4, generator=g)]
        trainer.loss(cuts, (torch.rand(16, generator=g) > 0.5).float()).backward()
        trainer.step()


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def test_checkpoint_holds_averaged_weights_and_resume_continues_exactly():
    # Prepare: an uninterrupted 20-step run that writes its state at step 10
    straight = _trainer()
    _train(straight, 10, 0)
    state = copy.deepcopy(straight.state())
    _train(straight, 10, 1)
    # Execute: resume a fresh trainer from the step-10 state; load the same state for prediction, with and without ema
    resumed = _trainer()
    resumed.load_state(copy.deepcopy(state), resume=True)
    _train(resumed, 10, 1)
    predicting, plain = _trainer(), _trainer(decay=0.0)
    predicting.load_state(copy.deepcopy(state))
    plain.load_state(copy.deepcopy(state))
    cuts = [torch.randn(5, 4)]
    # Assert: raw and averaged weights continue bit for bit; the "model" entry is the average, which predict uses
    assert all(torch.equal(a, b) for a, b in zip(_params(straight.model), _params(resumed.model)))
    assert all(torch.equal(a, b) for a, b in zip(_params(straight.eval_model()), _params(resumed.eval_model())))
    assert not torch.equal(state["model"]["net.0.weight"], state["optimizer"]["average"]["raw"]["net.0.weight"])
    for trainer in (predicting, plain):  # prediction's holders (vfl/inference) read .model after load_state
        assert all(torch.equal(a, b) for a, b in zip(trainer.model.state_dict().values(), state["model"].values()))
        assert trainer.eval_model() is trainer.model
    assert (predicting.predict(cuts) == plain.predict(cuts)).all()


def test_best_step_restore_brings_back_both_weights():
    # Prepare
    trainer = _trainer()
    _train(trainer, 5, 0)
    raw, averaged = _params(trainer.model), _params(trainer.eval_model())
    trainer.snapshot(5)
    # Execute
    _train(trainer, 5, 1)
    trainer.restore(5)
    # Assert: the step-5 raw weights train on, the step-5 average is evaluated, and the step count goes on from 5
    assert all(torch.equal(a, b) for a, b in zip(raw, _params(trainer.model)))
    assert all(torch.equal(a, b) for a, b in zip(averaged, _params(trainer.eval_model())))
    assert trainer.average.steps == 5 and not all(torch.equal(a, b) for a, b in zip(raw, averaged))


def test_bf16_fp32_layers_of_the_average_read_its_own_weights():
    # Prepare: under bf16 the logit layer runs a patched fp32 forward (keep_narrow_layers_fp32)
    trainer = _trainer(precision="bf16")
    # Execute: zero the averaged copy's logit layer
    with torch.no_grad():
        trainer.average.averaged.net[-1].weight.zero_()
        trainer.average.averaged.net[-1].bias.fill_(2.0)
    probs = trainer.predict([torch.randn(3, 4)])
    # Assert: predict reads the copy's weights, not the model's
    assert probs == pytest.approx(torch.sigmoid(torch.tensor(2.0)).item(), abs=1e-6)


def test_off_by_default_and_the_domain_is_checked():
    # Prepare / Execute
    trainer = _trainer(decay=0.0)
    # Assert
    assert TrainConfig().ema_decay == 0.0 and trainer.average is None and trainer.eval_model() is trainer.model
    with pytest.raises(ValueError, match=r"ema_decay must be in \[0.0, 1.0\), got ema_decay=1.0"):
        TrainConfig(ema_decay=1.0)
