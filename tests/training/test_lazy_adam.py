"""LazyAdam (row-indexed lazy Adam) against torch.optim.SparseAdam: the same update, bit for bit on a CPU."""

from __future__ import annotations

import copy

import pytest
import torch

from vfl.training.lazy_adam import LazyAdam, sum_duplicate_rows


def _table_and_batches(seed: int, rows: int = 500, dim: int = 8, steps: int = 6, batch: int = 300):
    g = torch.Generator().manual_seed(seed)
    init = torch.randn(rows, dim, generator=g)
    # repeated ids in a batch (summed by coalesce) and rows never touched (must not move)
    batches = [torch.randint(0, rows // 2, (batch,), generator=g) for _ in range(steps)]
    targets = [torch.randn(batch, dim, generator=g) for _ in range(steps)]
    return init, batches, targets


def _train(opt_cls, init, batches, targets, **kw):
    emb = torch.nn.Embedding.from_pretrained(init.clone(), freeze=False, sparse=True)
    opt = opt_cls([emb.weight], **kw)
    for ids, y in zip(batches, targets):
        opt.zero_grad(set_to_none=True)
        ((emb(ids) - y) ** 2).sum().backward()
        opt.step()
    return emb.weight.detach(), opt


@pytest.mark.parametrize(
    "kw", [{"lr": 1e-3}, {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-6}, {"lr": 1e-2, "maximize": True}]
)
def test_lazy_adam_equals_sparse_adam_bit_for_bit(kw):
    # Prepare
    init, batches, targets = _table_and_batches(0)
    # Execute
    want, ref = _train(torch.optim.SparseAdam, init, batches, targets, **kw)
    got, lazy = _train(LazyAdam, init, batches, targets, **kw)
    # Assert: parameters and both moments agree exactly; untouched rows never moved
    assert torch.equal(got, want)
    for p_ref, p_lazy in zip(ref.param_groups[0]["params"], lazy.param_groups[0]["params"]):
        s_ref, s_lazy = ref.state[p_ref], lazy.state[p_lazy]
        assert s_ref["step"] == s_lazy["step"] == len(batches)
        assert torch.equal(s_ref["exp_avg"], s_lazy["exp_avg"]) and torch.equal(
            s_ref["exp_avg_sq"], s_lazy["exp_avg_sq"]
        )
    assert torch.equal(got[250:], init[250:])
    assert not torch.equal(got[:250], init[:250])


@pytest.mark.parametrize("first, then", [(LazyAdam, torch.optim.SparseAdam), (torch.optim.SparseAdam, LazyAdam)])
def test_state_dicts_move_between_lazy_adam_and_sparse_adam(first, then):
    # Prepare: 3 steps with one optimizer, its state loaded into the other for 3 more, against 6 steps of SparseAdam
    init, batches, targets = _table_and_batches(1)
    want, _ = _train(torch.optim.SparseAdam, init, batches, targets, lr=1e-2)
    emb = torch.nn.Embedding.from_pretrained(init.clone(), freeze=False, sparse=True)
    opt = first([emb.weight], lr=1e-2)
    for i, (ids, y) in enumerate(zip(batches, targets)):
        if i == 3:
            # Execute: the hand-over (a deep copy: load_state_dict keeps tensor references)
            state = copy.deepcopy(opt.state_dict())
            opt = then([emb.weight], lr=1e-2)
            opt.load_state_dict(state)
        opt.zero_grad(set_to_none=True)
        ((emb(ids) - y) ** 2).sum().backward()
        opt.step()
    # Assert
    assert torch.equal(emb.weight.detach(), want)


def test_a_tensor_learning_rate_rounds_as_in_sparse_adam():
    # Prepare: SparseAdam keeps a tensor lr as a float32 tensor, so its step size is rounded to float32
    init, batches, targets = _table_and_batches(3)
    # Execute
    want, _ = _train(torch.optim.SparseAdam, init, batches, targets, lr=torch.tensor(0.0123))
    got, _ = _train(LazyAdam, init, batches, targets, lr=torch.tensor(0.0123))
    # Assert
    assert torch.equal(got, want)


def test_summing_duplicates_without_coalesce_equals_coalesce():
    # Prepare: the CUDA path's duplicate sum (torch.unique + index_add_), run here on the CPU, against coalesce
    g = torch.Generator().manual_seed(4)
    idx = torch.where(torch.rand(5000, generator=g) < 0.7, 0, torch.randint(0, 300, (5000,), generator=g))
    values = torch.randn(5000, 3, generator=g)
    want = torch.sparse_coo_tensor(idx[None], values, (300, 3), check_invariants=True).coalesce()
    # Execute
    rows, summed = sum_duplicate_rows(idx, values)
    # Assert: the same rows in the same order; sums equal to float32 rounding (another summation order)
    assert torch.equal(rows, want.indices()[0])
    torch.testing.assert_close(summed, want.values(), rtol=1e-5, atol=1e-5)
    assert float((summed - want.values()).abs().max()) < 1e-3 * float(want.values().abs().max())


def test_lazy_adam_refuses_a_dense_gradient_naming_what_it_takes():
    # Prepare
    w = torch.nn.Parameter(torch.zeros(4, 2))
    opt = LazyAdam([w], lr=1e-3)
    w.grad = torch.ones(4, 2)
    # Execute / Assert
    with pytest.raises(RuntimeError, match="sparse gradients only"):
        opt.step()


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: the CUDA row summation is not exercised here"
)
def test_lazy_adam_on_cuda_follows_sparse_adam_with_a_heavily_repeated_id():
    # Prepare: id 0 in 80% of the lookups (a missing value), as in Criteo's sparsest fields
    init, batches, targets = _table_and_batches(2)
    batches = [
        torch.where(torch.rand(b.shape, generator=torch.Generator().manual_seed(i)) < 0.8, 0, b)
        for i, b in enumerate(batches)
    ]
    # Execute
    want, _ = _train(torch.optim.SparseAdam, init, batches, targets, lr=1e-2)
    emb = torch.nn.Embedding.from_pretrained(init.clone().cuda(), freeze=False, sparse=True)
    opt = LazyAdam([emb.weight], lr=1e-2)
    for ids, y in zip(batches, targets):
        opt.zero_grad(set_to_none=True)
        ((emb(ids.cuda()) - y.cuda()) ** 2).sum().backward()
        opt.step()
    # Assert: the same update up to the order of float32 sums (atomic adds on the GPU)
    torch.testing.assert_close(emb.weight.detach().cpu(), want, rtol=1e-5, atol=1e-6)


def test_a_gradient_sparse_in_both_dimensions_is_refused_before_anything_moves():
    # Prepare: one good table and one whose gradient is sparse in rows and columns
    good = torch.nn.Embedding(10, 3, sparse=True)
    bad = torch.nn.Parameter(torch.zeros(4, 3))
    opt = LazyAdam([good.weight, bad], lr=1e-2)
    good(torch.tensor([1, 2])).sum().backward()
    bad.grad = torch.ones(4, 3).to_sparse()
    before = good.weight.detach().clone()
    # Execute / Assert
    with pytest.raises(RuntimeError, match="row-sparse gradient"):
        opt.step()
    assert torch.equal(good.weight, before) and len(opt.state) == 0


def test_a_checkpoints_fused_kernel_choice_follows_the_device_it_is_loaded_on():
    # Prepare: an Adam state dict as a CUDA run writes it (fused: True), loaded for CPU parameters
    from vfl.training.optim import OptimizerSet

    lin = torch.nn.Linear(3, 2)
    saved = OptimizerSet([torch.optim.Adam(lin.parameters(), lr=1e-3)]).state_dict()
    saved["0"]["param_groups"][0]["fused"] = True
    target = OptimizerSet([torch.optim.Adam(lin.parameters(), lr=1e-3)])
    # Execute
    target.load_state_dict(saved)
    # Assert: CPU parameters run the default (non-fused) kernel again
    assert target.optimizers[0].param_groups[0]["fused"] is None


def test_embedding_adam_eps_reaches_the_sparse_tables_and_scales_a_rare_rows_step_with_its_gradient():
    """train.embedding_adam_eps is the lazy Adam's eps. A row touched once with a tiny gradient g moves by about
    lr * sqrt(1-b2^t)/(1-b1^t) * (1-b1) g / (sqrt(1-b2) |g| + eps): about lr at the default eps (about 3.16 lr
    once t is large), and proportional to g once eps >> |g| (the rare-id regime the option is for, docs/models.md)."""
    from vfl.config.schema import TrainConfig
    from vfl.training.optim import build_optimizer

    # Prepare: a sparse table and a dense layer, one optimizer per eps; the step count t = 1 (no bias inflation)
    moved = {}
    for eps in (1e-8, 1e-4):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(10, 1, sparse=True))
        torch.nn.init.zeros_(model[0].weight)
        opt = build_optimizer(model, TrainConfig(lr=1e-3, embedding_adam_eps=eps))
        (lazy,) = [o for o in opt.optimizers if isinstance(o, LazyAdam)]
        assert lazy.param_groups[0]["eps"] == eps
        # Execute: one step where row 3 gets the gradient g = 1e-5 (one example's share of a batch's mean loss)
        (model[0](torch.tensor([3])).sum() * 1e-5).backward()
        opt.step()
        moved[eps] = float(-model[0].weight.detach()[3, 0])
        # Assert: only that row moved, by the closed form
        b1, b2, g, lr = 0.9, 0.999, 1e-5, 1e-3
        expected = lr * (1 - b2) ** 0.5 / (1 - b1) * (1 - b1) * g / ((1 - b2) ** 0.5 * g + eps)
        assert moved[eps] == pytest.approx(expected, rel=1e-4)
        assert int((model[0].weight != 0).sum()) == 1
    assert moved[1e-8] == pytest.approx(1e-3, rel=0.05)  # about the full lr whatever the gradient
    assert moved[1e-4] < moved[1e-8] / 10  # proportional to the (small) gradient


def test_a_resumed_optimizer_keeps_the_configured_eps_and_weight_decay_not_the_checkpoints():
    from vfl.config.schema import TrainConfig
    from vfl.training.optim import build_optimizer

    # Prepare: a checkpointed optimizer state written with torch's eps and no weight decay
    model = torch.nn.Sequential(torch.nn.Embedding(10, 2, sparse=True), torch.nn.Linear(2, 1))
    old = build_optimizer(model, TrainConfig(embedding_adam_eps=1e-8, weight_decay=0.0)).state_dict()
    # Execute: a run configured with other values loads it (train.resume_from)
    new = build_optimizer(model, TrainConfig(embedding_adam_eps=1e-4, weight_decay=0.01))
    new.load_state_dict(old)
    # Assert: the configured values hold
    (lazy,) = [o for o in new.optimizers if isinstance(o, LazyAdam)]
    (dense,) = [o for o in new.optimizers if type(o) is torch.optim.Adam]
    assert lazy.param_groups[0]["eps"] == 1e-4
    assert dense.param_groups[0]["weight_decay"] == 0.01
