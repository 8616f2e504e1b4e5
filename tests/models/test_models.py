"""The Wide&Deep bottom's first layer without the concatenation is nn.Linear on the concatenation."""

from __future__ import annotations

import torch

from vfl.models.wide_deep import WideDeepBottom


def _reference(m: WideDeepBottom, dense, missing, cat) -> torch.Tensor:
    """The textbook bottom: one Linear over concat(embeddings, dense, missing)."""
    ids = cat + m.offsets
    x = torch.cat([dense, missing], dim=1)
    deep_in = torch.cat([m.deep_embedding(ids).flatten(1), x], dim=1)
    return torch.cat([m.wide_dense(x) + m.wide_embedding(ids).sum(dim=1), m.deep(deep_in)], dim=1)


def test_first_layer_split_matches_linear_on_the_concatenation_forward_and_backward():
    # Prepare: 13 fields x 8 dims and 7 dense columns (an odd width, 118, as at MindSpore's 1054); float64 so that
    # only the summation order differs
    torch.manual_seed(0)
    m = WideDeepBottom([50] * 13, 7, embedding_dim=8, hidden=(16, 8)).double()
    dense, missing = torch.randn(32, 7, dtype=torch.float64), (torch.rand(32, 7) < 0.3).double()
    cat = torch.randint(0, 50, (32, 13))
    g = torch.randn(32, 2, dtype=torch.float64)
    # Execute
    out = m(dense, missing, cat)
    grads = torch.autograd.grad(out, list(m.parameters()), g)
    ref = _reference(m, dense, missing, cat)
    ref_grads = torch.autograd.grad(ref, list(m.parameters()), g)
    # Assert: equal to float64 rounding, every parameter's gradient included (sparse ones densified)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        a, b = (a.to_dense() if a.is_sparse else a), (b.to_dense() if b.is_sparse else b)
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_bottom_without_categorical_fields_is_the_plain_mlp():
    # Prepare: a party with dense columns only
    torch.manual_seed(1)
    m = WideDeepBottom([], 3, embedding_dim=8, hidden=(4,))
    dense, missing = torch.randn(5, 3), torch.zeros(5, 3)
    # Execute
    out = m(dense, missing, torch.zeros(5, 0, dtype=torch.int64))
    # Assert
    x = torch.cat([dense, missing], dim=1)
    torch.testing.assert_close(out, torch.cat([m.wide_dense(x), m.deep(x)], dim=1))
