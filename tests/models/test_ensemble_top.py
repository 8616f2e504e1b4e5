"""The ensemble top (TabM-mini): k members over one cut, trained on the mean of their losses, scored by the mean of
their logits; its options are checked with one line naming the value and the domain."""

from __future__ import annotations

import pytest
import torch

from vfl.config.schema import ConfigError, TopConfig, TrainConfig, parse_config
from vfl.data.task import Task
from vfl.models.registry import build_top
from vfl.training.top import TopTrainer

ENSEMBLE = {"name": "ensemble", "hidden": [8], "options": {"members": 4}}


def test_training_mode_gives_each_members_logits_and_evaluation_their_mean():
    # Prepare: an ensemble top of 4 members over two cuts of 3 and 5 values; 7 rows
    top = build_top(TopConfig.model_validate(ENSEMBLE), (3, 5), seed=0)
    cuts = torch.randn(7, 8)
    # Execute
    members = top.train()(cuts)
    mean = top.eval()(cuts)
    # Assert: (rows, members) in training, their mean (rows,) in evaluation; the members differ (own adapters)
    assert members.shape == (7, 4) and mean.shape == (7,)
    torch.testing.assert_close(mean, members.mean(dim=1))
    assert (members[:, 0] - members[:, 1]).abs().max() > 1e-4


def test_the_trainers_loss_is_the_mean_of_the_members_losses_not_the_loss_of_their_mean():
    # Prepare: a binary top trainer with the ensemble top; rows and labels
    trainer = TopTrainer(
        TrainConfig(), TopConfig.model_validate(ENSEMBLE), (3, 5), torch.device("cpu"), task=Task("binary")
    )
    cuts, labels = [torch.randn(16, 3), torch.randn(16, 5)], (torch.rand(16) > 0.5).float()
    # Execute
    loss = trainer.loss(cuts, labels)
    # Assert: the members' mean BCE (TabM sec. 3.2), which differs from the BCE of the mean logit
    members = trainer.model.train()(torch.cat(cuts, dim=1))
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    want = torch.stack([bce(members[:, i], labels) for i in range(4)]).mean()
    torch.testing.assert_close(loss, want)
    assert abs(loss.item() - bce(members.mean(dim=1), labels).item()) > 1e-6


@pytest.mark.parametrize("members, needle", [(1, "members"), (65, "members")])
def test_a_bad_member_count_is_one_line_naming_the_value_and_the_domain(members, needle):
    # Prepare: a leader config whose ensemble top has an out-of-domain member count
    doc = {"role": "leader", "party": "bank", "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
           "data": {"path": "unused"}, "model": {"top": {**ENSEMBLE, "options": {"members": members}}}}  # fmt: skip
    # Execute / Assert
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    assert needle in str(e.value) and str(members) in str(e.value)
