"""The Criteo preset: the raw Criteo format's column names and their default parties.

The columns: label, I1-I13 integer, C1-C26 hex; the default assignment of its columns to the leader and follower0 is
MindSpore Federated's splitnn_criteo.
"""

from __future__ import annotations

LABEL = "label"
DENSE_COLUMNS: tuple[str, ...] = tuple(f"I{i}" for i in range(1, 14))
CATEGORICAL_COLUMNS: tuple[str, ...] = tuple(f"C{i}" for i in range(1, 27))
ALL_FEATURES: tuple[str, ...] = DENSE_COLUMNS + CATEGORICAL_COLUMNS
N_RAW_FIELDS = 1 + len(DENSE_COLUMNS) + len(CATEGORICAL_COLUMNS)  # 40

# MindSpore Federated splitnn_criteo: the leader holds I1-I7, C1-C13 and the label,
# follower0 holds I8-I13, C14-C26.
DEFAULT_PARTIES: dict[str, dict] = {
    "leader": {
        "dense": list(DENSE_COLUMNS[:7]),
        "categorical": list(CATEGORICAL_COLUMNS[:13]),
        "label": True,
    },
    "follower0": {
        "dense": list(DENSE_COLUMNS[7:]),
        "categorical": list(CATEGORICAL_COLUMNS[13:]),
        "label": False,
    },
}
