"""Parameter counts of the built-in models from the config and the shard's manifest, without torch (preflight).

Each count is (embedding parameters, other parameters): the first are the sparse tables (rows x width), updated
lazily; the second the dense layers. A user's module (model.bottom.import) is not counted (None).
"""

from __future__ import annotations


def _mlp(sizes: list[int]) -> int:
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def bottom_parameters(bottom, field_sizes: list[int], n_numeric: int) -> tuple[int, int] | None:
    """(embedding, dense) parameter counts of model.bottom over these fields, as vfl/models builds it."""
    if bottom.import_ is not None:
        return None
    rows, f, k, hidden, cut = (
        max(sum(field_sizes), 1),
        len(field_sizes),
        bottom.embedding_dim,
        list(bottom.hidden),
        bottom.cut_dim,
    )
    d = f * k + 2 * n_numeric
    if bottom.name == "wide_deep":
        return rows * (1 + k), _mlp([d, *hidden, cut - 1]) + 2 * n_numeric + 1
    if bottom.name == "deepfm":
        numeric_vectors = n_numeric * k if bottom.options.get("fm_numeric", True) else 0
        return rows * (1 + k), _mlp([d, *hidden, cut - 1]) + 2 * n_numeric + 1 + numeric_vectors
    if bottom.name == "dcn_v2":
        layers, rank = bottom.options.get("cross_layers", 3), bottom.options.get("low_rank")
        cross = layers * (d * d + d if rank is None else 2 * d * rank + d)
        deep = _mlp([d, *hidden]) if hidden else 0
        stacked = bottom.options.get("structure", "parallel") == "stacked"
        width = (hidden[-1] if hidden else d) if stacked else d + (hidden[-1] if hidden else 0)
        return rows * k, cross + deep + width * cut + cut
    if bottom.name == "mlp":
        return rows * k, _mlp([d, *hidden, cut])
    raise ValueError(f"model.bottom.name {bottom.name!r} has no parameter count")
