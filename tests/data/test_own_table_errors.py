"""Bad input to your own table, each a one-line error naming the value and the allowed domain, nothing half-written:
a non-numeric value in a numeric column (skipped with a warning naming the line and column; an error with --strict),
an unknown kind or transform, a label outside its task's domain, an empty column, a regression label with one value,
a Parquet file of the wrong schema, a declared column the file lacks, a column given to two parties of one file."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from vfl.data.__main__ import main as data_main
from vfl.data.table_plan import PlanError, plan

LEADER = {
    "role": "leader",
    "party": "leader",
    "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
    "data": {
        "path": "unused",
        "schema": {
            "id": "cust",
            "columns": {"age": "numeric", "city": "categorical"},
            "label": {"column": "y", "classes": ["no", "yes"]},
        },
    },
}
ROWS = "cust,age,city,y\n" + "".join(
    f"c{i},{20 + i % 30},{'ab'[i % 2]},{'yes' if i % 3 else 'no'}\n" for i in range(200)
)


def _write(tmp_path, doc: dict, table: str, name: str = "t.csv") -> tuple[str, str]:
    cfg = tmp_path / "leader.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    path = tmp_path / name
    path.write_text(table)
    return str(cfg), str(path)


def _prepare(tmp_path, capsys, doc: dict, table: str, *flags: str) -> tuple[int, str]:
    cfg, path = _write(tmp_path, doc, table)
    code = data_main(["prepare", "--config", cfg, "--input", path, "--out", str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err
    return code, err


def _with(**edits) -> dict:
    import copy

    doc = copy.deepcopy(LEADER)
    for path, value in edits.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return doc


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_non_numeric_value_in_a_numeric_column_is_skipped_with_its_line_or_refused_with_strict(tmp_path, capsys):
    # Prepare: line 5 of the file holds 'n/a?' in the numeric column age
    table = ROWS.replace("c3,23,", "c3,n/a?,", 1)
    # Execute
    code, err = _prepare(tmp_path, capsys, LEADER, table)
    strict_code, strict_err = _prepare(tmp_path, capsys, LEADER, table, "--strict", "--force")
    # Assert: skipped with a warning naming line 5 and the column; refused under --strict
    assert code == 0 and "line 5" in err and "age is not a finite number" in err, err
    line = _one_error_line(strict_err)
    assert strict_code == 2 and "line 5: age is not a finite number ('n/a?')" in line


@pytest.mark.parametrize("name, sep", [("t.tsv", "\t"), ("t.csv", ",")])
@pytest.mark.parametrize("stray", ["yes{sep}", "no{sep}yes"])
def test_a_label_field_with_a_stray_delimiter_is_refused_with_strict_naming_the_line_and_value(
    tmp_path, capsys, name, sep, stray
):
    """The red team's case (issue 48, item 5): a label field with an extra tab was read as the label before it (the
    reader takes the header's columns of a longer line and drops the rest) even with --strict."""
    # Prepare: line 5 (row c3) of the file carries its label and a stray delimiter (and a value after it)
    table = ROWS.replace(",", sep).replace(
        f"c3{sep}23{sep}b{sep}no\n", f"c3{sep}23{sep}b{sep}{stray.format(sep=sep)}\n"
    )
    assert table != ROWS.replace(",", sep)
    cfg, path = _write(tmp_path, LEADER, table, name)
    # Execute
    code = data_main(["prepare", "--config", cfg, "--input", path, "--out", str(tmp_path / "out"), "--strict"])
    err = capsys.readouterr().err
    # Assert: refused in one line naming the line, its field count and the label's value
    line = _one_error_line(err)
    assert code == 2 and "line 5: 5 fields where the header names 4" in line, line
    assert f"label 'y' reads {stray.split('{')[0]!r}" in line and "run without --strict" in line
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (
            {"data__schema__columns": {"age": "numerical"}},
            "columns.age.kind must be one of ['numeric', 'categorical'], got 'numerical'",
        ),
        (
            {"data__schema__columns": {"age": {"kind": "numeric", "transform": "zscore"}}},
            "must be one of ['log1p', 'standardize', 'none', 'quantile_bins', 'piecewise_linear', 'periodic'], got 'zscore'",
        ),
        (
            {"data__schema__columns": {"city": {"kind": "categorical", "transform": "standardize"}}},
            "'standardize' is a numeric transform",
        ),
        (
            {"data__schema__columns": {"city": {"kind": "categorical", "transform": {"hash": {"buckets": 2}}}}},
            "buckets must be an integer in [3, 2147483647], got 2",
        ),
        ({"data__schema__keys": "hexa"}, "keys must be one of ['text', 'hex'], got 'hexa' (did you mean 'hex'?)"),
    ],
)
def test_an_unknown_kind_or_transform_is_a_config_error_naming_the_domain(tmp_path, capsys, edit, needle):
    # Execute
    code, err = _prepare(tmp_path, capsys, _with(**edit), ROWS)
    # Assert: the config's report names the key, the value and the domain (every problem at once, one line each)
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "out" / "leader")


def test_a_label_outside_its_task_is_an_error_naming_the_value_and_its_line(tmp_path, capsys):
    # Prepare: one row's label is 'maybe' in a binary task whose classes are no/yes
    table = ROWS.replace("c7,27,b,yes", "c7,27,b,maybe", 1)
    # Execute
    code, err = _prepare(tmp_path, capsys, LEADER, table)
    # Assert: the value, the line and the domain are named; no row was dropped silently, nothing was written
    line = _one_error_line(err)
    assert code == 2 and "line 9: label 'y' is 'maybe', not one of ['no', 'yes'] (binary task)" in line, line
    assert os.listdir(tmp_path / "out") == []


def test_a_three_class_label_under_a_binary_task_is_refused_not_dropped(tmp_path, capsys):
    # Prepare: labels 0/1/2 with the default binary classes ['0', '1']
    table = "cust,age,city,y\n" + "".join(f"c{i},{i},a,{i % 3}\n" for i in range(60))
    doc = _with(data__schema__label={"column": "y"})
    # Execute
    code, err = _prepare(tmp_path, capsys, doc, table)
    # Assert
    line = _one_error_line(err)
    assert code == 2 and "is '2', not one of ['0', '1'] (binary task)" in line and "train.task: multiclass" in line


@pytest.mark.parametrize("transform", ["standardize", "log1p"])  # fitted in a first pass; fit-free, read once
def test_an_empty_column_is_an_error_naming_it(tmp_path, capsys, transform):
    # Prepare: age is empty on every row
    table = "cust,age,city,y\n" + "".join(f"c{i},,a,yes\n" for i in range(50))
    columns = {"age": {"kind": "numeric", "transform": transform}, "city": {"kind": "categorical", "transform": "hash"}}
    # Execute
    code, err = _prepare(tmp_path, capsys, _with(data__schema__columns=columns), table)
    # Assert
    assert code == 2 and "column 'age' is empty in the training rows" in _one_error_line(err)
    assert not os.path.exists(tmp_path / "out" / "leader")


def test_a_declared_column_missing_from_the_file_is_named_with_a_suggestion(tmp_path, capsys):
    # Prepare: the schema says 'City', the file has 'city'
    doc = _with(data__schema__columns={"age": "numeric", "City": "categorical"})
    # Execute
    code, err = _prepare(tmp_path, capsys, doc, ROWS)
    # Assert
    line = _one_error_line(err)
    assert code == 2 and "categorical column 'City' is not in the header" in line and "did you mean 'city'?" in line


def test_a_parquet_file_of_the_wrong_schema_is_refused_naming_the_column_and_type(tmp_path, capsys):
    # Prepare: age is a list column in the Parquet file
    import pyarrow as pa
    import pyarrow.parquet as pq

    cfg, _ = _write(tmp_path, LEADER, "")
    table = pa.table({"cust": ["a", "b"], "age": [[1], [2]], "city": ["x", "y"], "y": ["no", "yes"]})
    pq.write_table(table, tmp_path / "t.parquet")
    # Execute
    code = data_main(["prepare", "--config", cfg, "--input", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    # Assert
    line = _one_error_line(err)
    assert code == 2 and "column 'age' has Parquet type list<" in line and "allowed:" in line


def test_undeclared_columns_are_ignored_with_one_info_line(tmp_path, capsys):
    # Prepare: the file has a column the schema does not declare
    table = "".join(line + (",secret\n" if i == 0 else ",1\n") for i, line in enumerate(ROWS.splitlines()))
    # Execute
    code, err = _prepare(tmp_path, capsys, LEADER, table)
    # Assert
    assert code == 0 and "not declared in data.schema, ignored: ['secret']" in err, err


def test_two_parties_given_the_same_column_of_one_combined_file_are_refused(tmp_path):
    # Prepare: leader and shop both declare 'city' of the one file they split
    cfg, path = _write(tmp_path, LEADER, ROWS)
    shop = {
        "role": "follower",
        "party": "shop",
        "network": {"connect": "tcp://127.0.0.1:5999"},
        "data": {"path": "unused", "schema": {"id": "cust", "columns": {"city": "categorical"}}},
    }
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(shop))
    # Execute / Assert
    with pytest.raises(PlanError, match="both leader and shop declare its column 'city'"):
        plan(str(tmp_path), [f"leader={path}", f"shop={path}"])


def test_a_regression_label_beyond_float32_is_refused_not_stored_as_inf(tmp_path, capsys):
    # Prepare: a real-valued label of 1e300 (float32 would hold inf)
    doc = _with(data__schema__label={"column": "y"})
    doc["train"] = {"task": "regression"}
    table = "cust,age,city,y\n" + "".join(f"c{i},{i},a,{1e300 if i == 3 else i}\n" for i in range(40))
    # Execute
    code, err = _prepare(tmp_path, capsys, doc, table)
    # Assert
    line = _one_error_line(err)
    assert code == 2 and "line 5: label 'y' is 1e+300, beyond float32's range" in line and "clip" in line


def test_two_id_texts_of_one_number_are_named_as_a_duplicate(tmp_path, capsys):
    # Prepare: '7' and '007' are the same integer id
    table = ROWS + "007,30,a,yes\nc7x,31,b,no\n"
    table = table.replace("c7,27,b,yes", "7,27,b,yes", 1)
    # Execute
    code, err = _prepare(tmp_path, capsys, LEADER, table)
    # Assert
    assert code == 2 and "sample id '7' = '007' appears more than once" in _one_error_line(err)


def test_a_byte_order_mark_before_the_header_is_not_part_of_the_first_name(tmp_path, capsys):
    # Prepare: the same rows with and without Excel's UTF-8 byte-order mark
    cfg, plain = _write(tmp_path, LEADER, ROWS)
    marked = tmp_path / "bom.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + ROWS.encode())
    # Execute
    a = data_main(["prepare", "--config", cfg, "--input", plain, "--out", str(tmp_path / "a")])
    b = data_main(["prepare", "--config", cfg, "--input", str(marked), "--out", str(tmp_path / "b")])
    # Assert: both prepare, to the same arrays
    assert a == b == 0, capsys.readouterr().err
    for split in ("train", "valid", "test"):
        for name in ("ids", "dense", "cat", "labels"):
            x = np.load(tmp_path / "a" / "leader" / split / f"{name}.npy")
            assert np.array_equal(x, np.load(tmp_path / "b" / "leader" / split / f"{name}.npy")), (split, name)
