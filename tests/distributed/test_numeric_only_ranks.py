"""A party with numeric columns only: its bottoms' embedding tables are 1-row placeholders no forward reads, frozen,
so DistributedDataParallel over 2 ranks steps without waiting for their gradients (it failed with "Expected sparse
gradient to be defined")."""

from __future__ import annotations

import os

import pytest
import torch

from tests.support.party_processes import free_port
from vfl.config.model_sections import BottomConfig
from vfl.models.inputs import InputSchema
from vfl.models.registry import build_bottom

SCHEMA = InputSchema(("a", "b"), (), ())
NAMES = ("wide_deep", "deepfm", "dcn_v2", "mlp")


def _bottom(name: str):
    return build_bottom(BottomConfig(name=name, hidden=(8,), embedding_dim=4, cut_dim=2), SCHEMA, 0, "p")


@pytest.mark.parametrize("name", NAMES)
def test_a_numeric_only_bottoms_placeholder_tables_are_frozen(name):
    # Prepare / Execute
    model = _bottom(name)
    # Assert: every sparse table is a frozen placeholder; the dense layers train
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert tables and all(not t.weight.requires_grad for t in tables)
    assert any(p.requires_grad for p in model.parameters())


def _two_rank_steps(rank: int, port: int, names: tuple[str, ...]) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from vfl.distributed.context import _no_buffer_sync, release_process_group

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        for name in names:
            model = _bottom(name)
            ddp = DistributedDataParallel(model, find_unused_parameters=False, **_no_buffer_sync())
            for _ in range(3):
                dense = torch.randn(4, 2)
                ddp(dense, torch.zeros(4, 2), torch.zeros(4, 0, dtype=torch.int64)).sum().backward()
    finally:
        ddp = model = None  # noqa: F841 -- the last reducer is freed by release_process_group's collection
        release_process_group()


def test_a_numeric_only_party_steps_on_two_ranks_with_every_builtin_bottom():
    # Prepare / Execute: two gloo ranks, three backward passes of each bottom through DDP
    torch.multiprocessing.spawn(_two_rank_steps, args=(free_port(), NAMES), nprocs=2, join=True)
    # Assert: spawn raises if a rank failed (DDP: "Expected sparse gradient to be defined")
