"""Bad or unusual input to your own table, named right: a text column declared numeric (named with its values, not
'empty'), a semicolon-delimited file (sniffed, or `data.schema.delimiter`; a header read as one column names the
delimiter and the option), class labels written as floats ('1.0'/'0.0', what pandas writes), regression's label-DP
report (its noise, never a flipped share), and a multi-party script's `--set` of a leader-only key."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from vfl.data.__main__ import main as data_main
from vfl.data.readers import arrow_text

LEADER = {
    "role": "leader",
    "party": "leader",
    "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
    "data": {
        "path": "unused",
        "schema": {"id": "cust", "columns": {"age": "numeric", "city": "categorical"}, "label": {"column": "y"}},
    },
}
ROWS = 200


def _table(sep: str = ",", label=lambda i: str(i % 2), work=None) -> str:
    head = ["cust", "age", "city", "y"] + (["work"] if work else [])
    lines = [sep.join(head)]
    for i in range(ROWS):
        row = [f"c{i}", str(20 + i % 30), "ab"[i % 2], label(i)] + ([work(i)] if work else [])
        lines.append(sep.join(row))
    return "\n".join(lines) + "\n"


def _prepare(tmp_path, capsys, table: str, schema_edits: dict | None = None, task: str | None = None):
    import copy

    tmp_path.mkdir(parents=True, exist_ok=True)
    doc = copy.deepcopy(LEADER)
    doc["data"]["schema"].update(schema_edits or {})
    if task:
        doc["train"] = {"task": task}
    (tmp_path / "leader.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "t.csv").write_text(table)
    out = tmp_path / "out"
    code = data_main(["prepare", "--config", str(tmp_path / "leader.yaml"), "--input", str(tmp_path / "t.csv")]
                     + ["--out", str(out), "--force"])  # fmt: skip
    return code, capsys.readouterr().err, out / "leader"


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(params=["fast", "text"])
def reader(request, monkeypatch):
    """Both text readers: pyarrow's whole-column parse and the pandas text path."""
    if request.param == "text":
        monkeypatch.setattr(arrow_text, "ENABLED", False)
    return request.param


def test_a_text_column_declared_numeric_is_named_with_its_values_not_called_empty(tmp_path, capsys, reader):
    # Prepare: 'work' holds text on most rows and is blank on every tenth (the census' workclass declared numeric)
    jobs = ["State-gov", "Private", "Self-emp"]
    table = _table(work=lambda i: "" if i % 10 == 0 else jobs[i % 3])
    # Execute
    code, err, shard = _prepare(tmp_path, capsys, table, {"columns": {"age": "numeric", "work": "numeric"}})
    # Assert: one line naming the column, the count and its values, and the fix; nothing written
    line = _error_line(err)
    assert code == 2 and "column 'work' is declared numeric but holds text: 180 of 180 values" in line, line
    assert "'Private'" in line and "'State-gov'" in line and "data.schema.columns.work: categorical" in line, line
    assert "empty" not in line and not shard.exists()


def test_a_few_bad_values_in_a_numeric_column_still_skip_their_rows_with_a_warning(tmp_path, capsys, reader):
    # Prepare: 3 of 200 ages are text
    table = _table().replace("c3,23,", "c3,n/a?,").replace("c5,25,", "c5,old,").replace("c8,28,", "c8,?,")
    # Execute
    code, err, shard = _prepare(tmp_path, capsys, table)
    # Assert: prepared without those rows, with the warning naming the first line
    assert code == 0 and "skipped 3 malformed line(s)" in err and "line 5 (age is not a finite number" in err, err
    assert sum(np.load(shard / s / "ids.npy").size for s in ("train", "valid", "test")) == ROWS - 3


@pytest.mark.parametrize("sep", [";", "|", "\t"])
def test_a_semicolon_pipe_or_tab_delimited_table_is_sniffed_and_gives_the_comma_files_shard(tmp_path, capsys, sep):
    # Prepare: the same rows with commas and with another delimiter
    code_a, _, comma = _prepare(tmp_path / "a", capsys, _table(","))
    # Execute
    code_b, err, other = _prepare(tmp_path / "b", capsys, _table(sep))
    # Assert
    assert code_a == code_b == 0, err
    for split in ("train", "valid", "test"):
        for name in ("ids", "dense", "cat", "labels"):
            assert np.array_equal(np.load(comma / split / f"{name}.npy"), np.load(other / split / f"{name}.npy"))


def test_a_header_read_as_one_column_names_the_delimiter_and_the_option(tmp_path, capsys):
    # Prepare: a colon-delimited file (no delimiter the reader sniffs), and a semicolon file declared comma
    colon_code, colon_err, _ = _prepare(tmp_path, capsys, _table(":"))
    declared_code, declared_err, _ = _prepare(tmp_path, capsys, _table(";"), {"delimiter": "comma"})
    # Assert: one line each, naming the header as read, the delimiter used and data.schema.delimiter
    colon = _error_line(colon_err)
    assert colon_code == 2 and "the header reads as one column 'cust:age:city:y'" in colon, colon
    assert "with the comma delimiter ',' (sniffed); set data.schema.delimiter" in colon, colon
    declared = _error_line(declared_err)
    assert declared_code == 2 and "',' (data.schema.delimiter); set data.schema.delimiter" in declared, declared
    assert "not in the header" not in colon + declared


def test_data_schema_delimiter_reads_the_file_with_that_delimiter(tmp_path, capsys):
    # Prepare: a semicolon file whose header holds more commas than semicolons (in an undeclared column's quoted name)
    table = "".join(
        line + (';"notes, a, b, c, d, e"' if k == 0 else ";x") + "\n" for k, line in enumerate(_table(";").splitlines())
    )
    # Execute
    sniffed_code, sniffed_err, _ = _prepare(tmp_path / "a", capsys, table)
    code, err, shard = _prepare(tmp_path / "b", capsys, table, {"delimiter": ";"})
    bad_code, bad_err, _ = _prepare(tmp_path / "c", capsys, table, {"delimiter": "colon"})
    # Assert: the sniffer's comma misreads it; the declared semicolon reads it; an unknown delimiter names the domain
    assert sniffed_code == 2 and "not in the header" in sniffed_err, sniffed_err
    assert code == 0 and (shard / "schema.json").exists(), err
    assert bad_code == 2 and "delimiter must be one of [',', '\\t', ';', '|']" in bad_err and "'colon'" in bad_err


@pytest.mark.parametrize("reader_kind", ["fast", "text"])
def test_binary_labels_written_as_floats_are_the_integer_classes(tmp_path, capsys, monkeypatch, reader_kind):
    # Prepare: the same labels as 0/1 and as 0.0/1.0 (what pandas writes for an integer column with a missing value)
    if reader_kind == "text":
        monkeypatch.setattr(arrow_text, "ENABLED", False)
    code_a, _, ints = _prepare(tmp_path / "a", capsys, _table(label=lambda i: str(i % 3 % 2)))
    # Execute
    code_b, err, floats = _prepare(tmp_path / "b", capsys, _table(label=lambda i: f"{i % 3 % 2}.0"))
    # Assert: prepared, to the same labels
    assert code_a == code_b == 0, err
    for split in ("train", "valid", "test"):
        assert np.array_equal(np.load(ints / split / "labels.npy"), np.load(floats / split / "labels.npy"))


def test_multiclass_labels_written_as_floats_are_integer_classes_in_numeric_order(tmp_path, capsys):
    # Prepare: 11 classes written 0.0 .. 10.0 (as text, '10.0' sorts before '2.0')
    import json

    table = _table(label=lambda i: f"{i % 11}.0")
    # Execute
    code, err, shard = _prepare(tmp_path, capsys, table, task="multiclass")
    # Assert: classes '0'..'10' in numeric order, each row's label its integer
    assert code == 0, err
    assert json.loads((shard / "schema.json").read_text())["label"]["classes"] == [str(k) for k in range(11)]
    ids = np.concatenate([np.load(shard / s / "ids.npy") for s in ("train", "valid", "test")])
    labels = np.concatenate([np.load(shard / s / "labels.npy") for s in ("train", "valid", "test")])
    from vfl.data.ids import ids64

    row = {int(v): i for i, v in enumerate(ids64(np.array([f"c{i}" for i in range(ROWS)], dtype=object)))}
    assert all(labels[k] == row[int(v)] % 11 for k, v in enumerate(ids))


def test_a_non_integral_float_label_is_still_refused_under_a_binary_task(tmp_path, capsys):
    # Prepare: one label 0.5
    table = _table(label=lambda i: "0.5" if i == 9 else f"{i % 2}.0")
    # Execute
    code, err, shard = _prepare(tmp_path, capsys, table)
    # Assert
    line = _error_line(err)
    assert code == 2 and "line 11: label 'y' is '0.5', not one of ['0', '1']" in line and not shard.exists()


def test_regressions_label_dp_report_gives_its_noise_not_a_flipped_share(shards_small, tmp_path):
    # Prepare: regression shards, Laplace label DP at eps 1
    from tests.support.regression_shards import regression_shards
    from vfl.config.schema import LabelDPConfig
    from vfl.data.shards import PartyShard
    from vfl.data.task import Task
    from vfl.labeldp.release import LabelDPRelease, leader_training_labels

    shards = regression_shards(shards_small, tmp_path / "shards")
    label_dp = {"eps": 1.0, "mechanism": "laplace", "clip": [0.0, 40.0], "store_dir": str(tmp_path / "store")}
    release = LabelDPRelease.from_config(LabelDPConfig(**label_dp), Task("regression"))
    # Execute
    report = leader_training_labels(release, PartyShard(str(shards / "leader"))).report
    # Assert: the noise's RMSE on train and valid (Laplace at eps 1 on [0, 40]: scale 40, RMSE ~ 40 sqrt(2) > 10)
    assert "flipped_fraction" not in report and "valid_flipped_fraction" not in report, sorted(report)
    assert report["noise_rmse"] > 10 and report["valid_noise_rmse"] > 10, report
