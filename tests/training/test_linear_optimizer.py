"""train.linear_optimizer: the bottom's linear part (wide_deep's wide part, deepfm's first order) has an Adagrad of
its own; the other parameters keep theirs; the averaged weights stay exact; resume and the dry run refuse misuse.
(Split == centralized with it runs over real processes in tests/training/test_split_training.py, with micro-batches, averaged
weights and a restore.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vfl.config.schema import TrainConfig
from vfl.models.inputs import InputSchema
from vfl.models.registry import build_bottom, linear_parameters
from vfl.training.lazy_adam import LazyAdam
from vfl.training.optim import ScheduledOptimizer, build_optimizer
from vfl.training.weight_average import WeightAverage

LINEAR = {"lr": 0.05}
# two numeric columns (with training statistics, for numeric_scaling standard), three categorical fields
SCHEMA = InputSchema(("a", "b"), ("c", "d", "e"), (7, 5, 9), (0.5, 2.0), (1.0, 3.0))


def _bottom(name: str, numeric_scaling: str = "none") -> nn.Module:
    from vfl.config.model_sections import BottomConfig

    cfg = BottomConfig(name=name, embedding_dim=4, hidden=[8], cut_dim=2, numeric_scaling=numeric_scaling)
    return build_bottom(cfg, SCHEMA, 0, "p")


@pytest.mark.parametrize("name", ["wide_deep", "deepfm"])
def test_the_linear_part_has_its_own_adagrad_and_every_other_parameter_keeps_its_optimizer(name):
    # Prepare
    model = _bottom(name)
    # Execute
    plain = build_optimizer(model, TrainConfig())
    split = build_optimizer(model, TrainConfig(linear_optimizer=LINEAR), bottom=True)
    # Assert: the same parameters in all, each in one optimizer; the linear ones (one weight per id and the numeric
    # linear layer) in the Adagrad at its own lr, none of them in Adam or lazy Adam
    linear = {id(p) for p in linear_parameters(model)}
    assert len(linear) == 3 and any(
        p.dim() == 2 and p.shape[1] == 1 and p.shape[0] > 2 for p in linear_parameters(model)
    )
    assert plain.kinds() == ["Adam", "LazyAdam"] and split.kinds() == ["Adam", "LazyAdam", "Adagrad"]
    held = [[id(p) for g in o.param_groups for p in g["params"]] for o in split.optimizers]
    assert set(held[2]) == linear and not linear & set(held[0] + held[1])
    assert sorted(sum(held, [])) == sorted(id(p) for p in model.parameters())
    assert split.optimizers[2].param_groups[0]["lr"] == 0.05


def test_the_numeric_scaler_wrapper_still_exposes_the_linear_part():
    # Prepare / Execute: numeric_scaling standard wraps the bottom in a scaler module
    wrapped = _bottom("wide_deep", "standard")
    # Assert
    assert len(linear_parameters(wrapped)) == 3


def test_the_linear_adagrad_moves_only_the_rows_a_batch_touched_and_the_lazy_average_stays_exact():
    # Prepare: a wide_deep bottom, averaged weights (their lazy rows rely on sparse steps touching only the batch's rows)
    model = _bottom("wide_deep")
    cfg = TrainConfig(lr=0.05, ema_decay=0.8, linear_optimizer=LINEAR)
    opt = ScheduledOptimizer(build_optimizer(model, cfg, bottom=True), cfg, 12)
    opt.average = WeightAverage(model, cfg.ema_decay)
    full = {n: p.detach().double().clone() for n, p in model.named_parameters()}
    wide = model.wide_embedding.weight
    g = torch.Generator().manual_seed(1)
    # Execute
    for _ in range(12):
        before = wide.detach().clone()
        cat = torch.stack([torch.randint(0, 3, (6,), generator=g) for _ in range(3)], 1)  # ids 0-2 of each field
        dense, missing = torch.randn(6, 2, generator=g), torch.zeros(6, 2)
        opt.zero_grad()
        model(dense, missing, cat).pow(2).sum().backward()
        opt.step()
        touched = set((cat + model.offsets).flatten().tolist())
        moved = set(torch.nonzero((wide.detach() != before).any(1)).flatten().tolist())
        assert moved <= touched and moved  # Adagrad on a sparse gradient: the batch's rows only
        for n, p in model.named_parameters():
            full[n] = 0.8 * full[n] + 0.2 * p.detach().double()
    averaged = dict(opt.average.sync().named_parameters())
    # Assert: the lazy per-row average equals the plain average everywhere
    for n, want in full.items():
        torch.testing.assert_close(averaged[n].double(), want, rtol=0, atol=1e-6)


def test_resuming_with_another_optimizer_layout_is_refused_in_one_line():
    from vfl.config.schema import ConfigError

    # Prepare: a checkpointed optimizer without a linear optimizer, and one written before layouts were recorded
    model = _bottom("wide_deep")
    saved = build_optimizer(model, TrainConfig()).state_dict()
    older = {k: v for k, v in saved.items() if k != "kinds"}
    # Execute
    refusals = []
    for state in (saved, older):
        with pytest.raises(ConfigError) as e:
            build_optimizer(model, TrainConfig(linear_optimizer=LINEAR), bottom=True).load_state_dict(state)
        refusals.append(str(e.value))
    build_optimizer(model, TrainConfig()).load_state_dict(older)  # the same layout loads, recorded or not
    # Assert
    assert not any("\n" in r for r in refusals)
    assert "['Adam', 'LazyAdam'] differ from this config's ['Adam', 'LazyAdam', 'Adagrad']" in refusals[0]
    assert "optimizers of [6, 2] parameters (an older checkpoint) differ" in refusals[1]


@pytest.mark.parametrize("name", ["mlp", "dcn_v2"])
def test_a_bottom_without_a_linear_part_is_refused_before_any_peer_is_contacted(tmp_path, shards_small, name):
    # Prepare
    from tests.support.party_processes import party_configs
    from vfl.config.schema import ConfigError, load_config
    from vfl.data.shards import PartyShard
    from vfl.models.registry import dry_run_models

    bottoms = {"leader": {"name": name, "embedding_dim": 4, "hidden": [8], "cut_dim": 2}}
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"linear_optimizer": LINEAR}, bottoms=bottoms)
    cfg = load_config(cfgs["leader"])
    # Execute
    with pytest.raises(ConfigError) as e:
        dry_run_models(cfg, PartyShard(cfg.data.path))
    # Assert
    assert "\n" not in str(e.value)
    assert f"train.linear_optimizer trains a bottom's linear part, but bottom {name!r} has none" in str(e.value)


def test_lazy_adam_is_untouched_without_the_option():
    # Prepare / Execute
    model = _bottom("deepfm")
    (lazy,) = [o for o in build_optimizer(model, TrainConfig()).optimizers if isinstance(o, LazyAdam)]
    # Assert: both sparse tables (first order and embeddings) in lazy Adam, as before the option existed
    assert len(lazy.param_groups[0]["params"]) == 2


def test_prediction_loads_a_checkpoint_of_another_optimizer_layout_and_resume_refuses_it(tmp_path, shards_small):
    # Prepare: the leader's bottom trained with the linear optimizer (its state as a checkpoint holds it), and the
    # same party configured without it (a prediction config, or a resume with another layout)
    from tests.support.party_processes import party_configs
    from vfl.config.schema import ConfigError, load_config
    from vfl.data.shards import PartyShard
    from vfl.models.user_module import ModelError
    from vfl.training.party import BottomParty

    def party(train):
        cfg = load_config(party_configs(str(tmp_path / str(len(train))), str(shards_small), train=train)["leader"])
        return BottomParty(cfg, PartyShard(cfg.data.path), torch.device("cpu"))

    state = party({"linear_optimizer": LINEAR}).state()
    plain = party({})
    # Execute / Assert: prediction (resume=False) takes the model and never reads the optimizer's layout
    plain.load_state(state)
    assert all(torch.equal(plain.model.state_dict()[k], v) for k, v in state["model"].items())
    with pytest.raises(ConfigError, match="differ from this config's"):
        plain.load_state(state, resume=True)
    # a bottom without a linear part is refused wherever it is built (the centralized reference too)
    bottoms = {"leader": {"name": "mlp", "embedding_dim": 4, "hidden": [8], "cut_dim": 2}}
    cfgs = party_configs(str(tmp_path / "mlp"), str(shards_small), train={"linear_optimizer": LINEAR}, bottoms=bottoms)
    cfg = load_config(cfgs["leader"])
    with pytest.raises(ModelError, match="but this bottom has none"):
        BottomParty(cfg, PartyShard(cfg.data.path), torch.device("cpu"))
