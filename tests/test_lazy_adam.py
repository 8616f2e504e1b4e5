"""LazyAdam (row-indexed lazy Adam) against torch.optim.SparseAdam: the same update, bit for bit on a CPU."""
from __future__ import annotations

import copy

import pytest
import torch

from vfl.training.lazy_adam import LazyAdam


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


@pytest.mark.parametrize("kw", [{"lr": 1e-3}, {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-6}, {"lr": 1e-2, "maximize": True}])
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
        assert torch.equal(s_ref["exp_avg"], s_lazy["exp_avg"]) and torch.equal(s_ref["exp_avg_sq"], s_lazy["exp_avg_sq"])
    assert torch.equal(got[250:], init[250:])
    assert not torch.equal(got[:250], init[:250])


def test_lazy_adam_state_loads_into_sparse_adam_and_continues_identically():
    # Prepare: 3 steps with LazyAdam, then its state dict loaded into SparseAdam (and the reverse) for 3 more
    init, batches, targets = _table_and_batches(1)
    half, _ = _train(LazyAdam, init, batches[:3], targets[:3], lr=1e-2)
    emb_a = torch.nn.Embedding.from_pretrained(init.clone(), freeze=False, sparse=True)
    opt_a = LazyAdam([emb_a.weight], lr=1e-2)
    for ids, y in zip(batches[:3], targets[:3]):
        opt_a.zero_grad(set_to_none=True)
        ((emb_a(ids) - y) ** 2).sum().backward()
        opt_a.step()
    emb_b = torch.nn.Embedding.from_pretrained(emb_a.weight.detach().clone(), freeze=False, sparse=True)
    opt_b = torch.optim.SparseAdam([emb_b.weight], lr=1e-2)
    # Execute
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # load_state_dict keeps tensor references
    for emb, opt in ((emb_a, opt_a), (emb_b, opt_b)):
        for ids, y in zip(batches[3:], targets[3:]):
            opt.zero_grad(set_to_none=True)
            ((emb(ids) - y) ** 2).sum().backward()
            opt.step()
    # Assert
    assert torch.equal(half, _train(LazyAdam, init, batches[:3], targets[:3], lr=1e-2)[0])
    assert torch.equal(emb_a.weight, emb_b.weight)


def test_lazy_adam_refuses_a_dense_gradient_naming_what_it_takes():
    # Prepare
    w = torch.nn.Parameter(torch.zeros(4, 2))
    opt = LazyAdam([w], lr=1e-3)
    w.grad = torch.ones(4, 2)
    # Execute / Assert
    with pytest.raises(RuntimeError, match="sparse gradients only"):
        opt.step()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA row summation is not exercised here")
def test_lazy_adam_on_cuda_follows_sparse_adam_with_a_heavily_repeated_id():
    # Prepare: id 0 in 80% of the lookups (a missing value), as in Criteo's sparsest fields
    init, batches, targets = _table_and_batches(2)
    batches = [torch.where(torch.rand(b.shape, generator=torch.Generator().manual_seed(i)) < 0.8, 0, b)
               for i, b in enumerate(batches)]
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
