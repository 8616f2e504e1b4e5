"""A party's frozen transforms as an ONNX graph: its raw column values and categorical keys in, its bottom's inputs out.

The transforms are those that `prepare` fitted on the party's own training rows and saved with its shard
(`schema.json` and `vocab/NNNN.npy`); nothing is refitted. The graph reproduces vfl/data/table.py's `FittedColumn.apply` (and vfl/data/transforms.py):

| transform | ONNX |
|---|---|
| log1p | sign(x) log(1 + abs(x)) in float64, cast to float32 (numpy's float32 log1p: within one float32 ulp) |
| standardize / none | (x - mean) / std in float64, cast to float32; 0 where missing |
| piecewise_linear / periodic | as standardize (the bottom's graph holds the embedding and its bins) |
| quantile_bins | 2 + the number of bin edges <= x (numpy's searchsorted, side right); 0 where missing |
| vocabulary | ai.onnx.ml LabelEncoder: key -> 2 + its position in the sorted vocabulary, 1 if absent; 0 where missing |
| hash | 2 + splitmix64(key ^ salt) mod (buckets - 2) in uint64 arithmetic; 0 where missing |

Inputs (n rows): `numeric` float64 (n, numeric columns), `numeric_missing` bool (same shape), `cat_key` int64 (n,
categorical columns: the uint64 keys of vfl/data/readers, viewed as int64), `cat_missing` bool. Outputs: `dense`
float32, `dense_missing` float32 and `cat` int64, in the shard's column order (`dense` and `cat` arrays).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vfl.config.table_schema import EMBEDDINGS
from vfl.data.errors import DataError
from vfl.data.frozen import FrozenTransforms

OPSET = 18  # BitwiseXor (the hash transform) needs 18
ML_OPSET = 3  # ai.onnx.ml LabelEncoder with int64 keys
INPUTS = ("numeric", "numeric_missing", "cat_key", "cat_missing")
OUTPUTS = ("dense", "dense_missing", "cat")
KEY_SCHEMES = {  # data.schema.keys -> how a client keys a categorical value (vfl/data/readers/category_keys.py)
    "text": "pandas.util.hash_array(text values as object, encoding='utf8', hash_key='vfl-categories01', "
    "categorize=True) as uint64, 1 where that gives 0 (0 means missing); empty, NA, N/A, NaN, nan, null, NULL "
    "and None are missing",
    "hex": "8 hex digits: int(text, 16); other text: 2**32 + zlib.crc32(utf-8 bytes); empty is missing",
}


@dataclass
class FrozenColumn:
    """One column's fitted transform as saved with the shard."""

    name: str
    kind: str  # numeric | categorical
    transform: str  # log1p | standardize | none | quantile_bins | piecewise_linear | periodic | vocabulary | hash
    params: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)
    vocab: np.ndarray | None = None

    @property
    def output(self) -> str:
        return "categorical" if self.kind == "categorical" or self.transform == "quantile_bins" else "numeric"


@dataclass
class FrozenTable:
    """A party's frozen transforms: its raw columns in input order, and how its categorical text is keyed."""

    columns: list[FrozenColumn]
    key_scheme: str  # a key of KEY_SCHEMES (the schema's `keys`)
    id_column: str = "id"  # the column of the party's file that holds the sample ids

    @property
    def numeric(self) -> list[FrozenColumn]:
        return [c for c in self.columns if c.kind == "numeric"]

    @property
    def categorical(self) -> list[FrozenColumn]:
        return [c for c in self.columns if c.kind == "categorical"]

    @property
    def dense_names(self) -> list[str]:
        return [c.name for c in self.numeric if c.output == "numeric"]

    @property
    def cat_names(self) -> list[str]:
        return [c.name for c in self.categorical] + [c.name for c in self.numeric if c.output == "categorical"]


def frozen_table(shard_dir: str) -> FrozenTable:
    """The transforms saved with a party's shard (its schema.json), as vfl/data/frozen.py reads them for prediction,
    with its manifest's column order checked."""
    frozen = FrozenTransforms.of_shard(shard_dir)
    cols = [
        FrozenColumn(c.name, c.kind, c.transform, dict(c.params), dict(c.state), c.vocab) for c in frozen.table.columns
    ]
    return FrozenTable(cols, frozen.table.schema.keys, frozen.table.schema.id)


class _Graph:
    """Node and constant bookkeeping for one ONNX graph."""

    def __init__(self):
        from onnx import helper

        self.helper = helper
        self.nodes: list = []
        self.initializers: list = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"t{self._n}_{hint}"

    def const(self, value, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str = "", **attrs) -> str:
        out = self.name(hint or op_type.lower())
        domain = attrs.pop("domain", "")
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], domain=domain, **attrs))
        return out


def _splitmix64(g: _Graph, u: str) -> str:
    """privacy/public_hash.py's splitmix64 in ONNX uint64 arithmetic (wrapping multiplication)."""
    u64 = np.uint64
    z = g.op("Add", [u, g.const(u64(0x9E3779B97F4A7C15))])
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z = g.op("BitwiseXor", [z, g.op("BitShift", [z, g.const(u64(shift))], direction="RIGHT")])
        z = g.op("Mul", [z, g.const(u64(mult))])
    return g.op("BitwiseXor", [z, g.op("BitShift", [z, g.const(u64(31))], direction="RIGHT")])


def _numeric(g: _Graph, col: FrozenColumn, x: str, miss: str) -> str:
    """float32 (n, 1) of a numeric output, or int64 (n, 1) ids of a binned column; x float64 (n, 1), 0 if missing."""
    if col.transform == "log1p":
        mag = g.op("Cast", [g.op("Cast", [g.op("Abs", [x])], to=1)], to=11)  # abs(x) as float32, as numpy does
        log = g.op("Cast", [g.op("Log", [g.op("Add", [mag, g.const(1.0)])])], to=1)
        return g.op("Where", [g.op("Less", [x, g.const(0.0)]), g.op("Neg", [log]), log], "log1p")
    if col.transform in ("standardize", "none", *EMBEDDINGS):
        v = x
        if col.transform != "none":
            v = g.op("Div", [g.op("Sub", [x, g.const(float(col.state["mean"]))]), g.const(float(col.state["std"]))])
        return g.op("Where", [miss, g.const(np.float32(0)), g.op("Cast", [v], to=1)], "standardize")
    if col.transform == "quantile_bins":
        edges = np.asarray(col.state["edges"], np.float64)
        if edges.size:
            below = g.op("Cast", [g.op("LessOrEqual", [g.const(edges), x])], to=7)  # (n, E)
            ids = g.op("Add", [g.op("ReduceSum", [below, g.const(np.array([1], np.int64))], keepdims=1), _two(g)])
        else:  # one bin: every present value gets id 2
            ids = g.op("Add", [g.op("Mul", [g.op("Cast", [x], to=7), _zero(g)]), _two(g)])
        return g.op("Where", [miss, g.const(np.int64(0)), ids], "bins")
    raise DataError(f"column {col.name!r}: transform {col.transform!r} has no ONNX form")


def _zero(g: _Graph) -> str:
    return g.const(np.int64(0))


def _two(g: _Graph) -> str:
    return g.const(np.int64(2))


def _categorical(g: _Graph, col: FrozenColumn, key: str, miss: str) -> str:
    """int64 (n, 1) ids of a categorical column from its int64 (n, 1) keys."""
    if col.transform == "vocabulary":
        vocab = np.asarray(col.vocab, np.uint64)
        if vocab.size:
            ids = g.op(
                "LabelEncoder",
                [key],
                "vocab",
                domain="ai.onnx.ml",
                keys_int64s=vocab.view(np.int64).tolist(),
                values_int64s=list(range(2, 2 + vocab.size)),
                default_int64=1,
            )
        else:
            ids = g.op("Add", [g.op("Mul", [key, _zero(g)]), g.const(np.int64(1))])
    elif col.transform == "hash":
        salted = g.op("BitwiseXor", [g.op("Cast", [key], to=13), g.const(np.uint64(col.state["salt"]))])
        bucket = g.op("Mod", [_splitmix64(g, salted), g.const(np.uint64(int(col.params["buckets"]) - 2))])
        ids = g.op("Add", [g.op("Cast", [bucket], to=7), g.const(np.int64(2))])
    else:
        raise DataError(f"column {col.name!r}: transform {col.transform!r} has no ONNX form")
    return g.op("Where", [miss, g.const(np.int64(0)), ids], "cat")


def transforms_model(table: FrozenTable):
    """The ONNX model (onnx.ModelProto) of a party's frozen transforms: INPUTS -> OUTPUTS."""
    from onnx import TensorProto as T
    from onnx import helper

    g = _Graph()

    def column(source: str, j: int) -> str:
        return g.op("Gather", [source, g.const(np.array([j], np.int64))], axis=1)

    dense, cats_of_numeric, cats = [], [], []
    for j, col in enumerate(table.numeric):
        miss = column("numeric_missing", j)
        x = g.op("Where", [miss, g.const(0.0), column("numeric", j)])  # NaN (or any value) where missing -> 0
        out = _numeric(g, col, x, miss)
        (dense if col.output == "numeric" else cats_of_numeric).append(out)
    for j, col in enumerate(table.categorical):
        cats.append(_categorical(g, col, column("cat_key", j), column("cat_missing", j)))
    rows = g.op("Slice", [g.op("Shape", ["numeric_missing"]), g.const(np.array([0])), g.const(np.array([1]))])

    def stack(parts: list[str], dtype: int, np_dtype, out: str) -> None:
        if parts:
            g.nodes.append(helper.make_node("Concat", parts, [out], axis=1))
        else:  # no such column: an (n, 0) array
            shape = g.op("Concat", [rows, g.const(np.array([0], np.int64))], axis=0)
            g.nodes.append(
                helper.make_node(
                    "ConstantOfShape", [shape], [out], value=helper.make_tensor("v", dtype, [1], [np_dtype(0)])
                )
            )

    stack(dense, T.FLOAT, np.float32, "dense")
    numeric_out = [j for j, c in enumerate(table.numeric) if c.output == "numeric"]
    if numeric_out:
        picked = g.op("Gather", ["numeric_missing", g.const(np.array(numeric_out, np.int64))], axis=1)
        g.nodes.append(helper.make_node("Cast", [picked], ["dense_missing"], to=T.FLOAT))
    else:
        stack([], T.FLOAT, np.float32, "dense_missing")
    stack(cats + cats_of_numeric, T.INT64, np.int64, "cat")
    n_num, n_cat = len(table.numeric), len(table.categorical)
    graph = helper.make_graph(
        g.nodes,
        "vfl_transforms",
        [
            helper.make_tensor_value_info("numeric", T.DOUBLE, ["n", n_num]),
            helper.make_tensor_value_info("numeric_missing", T.BOOL, ["n", n_num]),
            helper.make_tensor_value_info("cat_key", T.INT64, ["n", n_cat]),
            helper.make_tensor_value_info("cat_missing", T.BOOL, ["n", n_cat]),
        ],
        [
            helper.make_tensor_value_info("dense", T.FLOAT, ["n", len(table.dense_names)]),
            helper.make_tensor_value_info("dense_missing", T.FLOAT, ["n", len(table.dense_names)]),
            helper.make_tensor_value_info("cat", T.INT64, ["n", len(table.cat_names)]),
        ],
        g.initializers,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    )
