"""The Criteo preset: the raw Criteo format's columns, their default parties, and a party's columns as a table schema.

The columns: label, I1-I13 integer, C1-C26 hex; the default assignment of its columns to the leader and follower0 is
MindSpore Federated's splitnn_criteo. `party_schema` declares a Criteo-style party's columns in data.schema's terms
(vfl/config/table_schema.py), with Criteo's key scheme (`keys: hex`: a hex value is its own number), so
vfl/data/prepare_table.py prepares a Criteo party file like any table and its shard's schema.json serves prediction.
"""

from __future__ import annotations

from vfl.config.table_schema import ColumnSpec, LabelSpec, SchemaConfig

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


def party_schema(
    dense: tuple[str, ...] | list[str],
    categorical: tuple[str, ...] | list[str],
    label_column: str | None,
    hash_buckets: int,
    vocab_min_count: int | None,
    id_column: str = "id",
    num_classes: int = 2,
) -> SchemaConfig:
    """A Criteo-style party's columns as a table schema (vfl/config/table_schema.py): each dense column log1p; each
    categorical column hashed into hash_buckets ids (vocab_min_count None) or a vocabulary of the values seen at
    least vocab_min_count times, keyed by the hex scheme; the label (the leader's, label_column) of classes
    0..num_classes-1."""
    if vocab_min_count is None:
        cat = {"hash": {"buckets": int(hash_buckets)}}
    else:
        cat = {"vocabulary": {"min_count": int(vocab_min_count)}}
    columns = {c: ColumnSpec(kind="numeric", transform={"log1p": {}}) for c in dense}
    columns.update({c: ColumnSpec(kind="categorical", transform=cat) for c in categorical})
    label = (
        LabelSpec(column=label_column, classes=tuple(str(k) for k in range(num_classes)))
        if label_column is not None
        else None
    )
    return SchemaConfig(id=id_column, columns=columns, label=label, keys="hex")
