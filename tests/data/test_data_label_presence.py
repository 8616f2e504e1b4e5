"""The leader's training prepare: which ids enter the private set intersection never depends on which rows have a
usable label. A file with a blank or invalid label is refused in one line (how many rows, the first lines, the first
value, the domain), for a Criteo-format party file (the Criteo preset of the one table path), fast reader and text path alike, with
and without --strict; nothing is written. (Prediction keeps such rows: tests/inference/test_predict_follower_view.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from vfl.data.__main__ import main as data_main
from vfl.data.readers import arrow_text
from vfl.data.shards import PartyShard

ROWS = 300
# rows of the file whose label is made blank or invalid, and what it becomes (a blank, a space, a class out of the
# domain, a word, a sign, a fraction; an integral decimal such as '1.0' is its integer's class, as in any table)
SPOILED = {r: ["", " ", "7", "yes", "-1", "1.5"][k % 6] for k, r in enumerate(range(11, ROWS, 13))}
REFUSED = "refused"


def _criteo_rows(num_classes: int, spoiled: dict[int, str]) -> list[str]:
    """A Criteo-format leader file (id, I1, C1, label), rows in id order; spoiled: row -> its label's new text."""
    lines = ["id\tI1\tC1\tlabel"]
    for r in range(ROWS):
        label = spoiled.get(r, str(r * 7 % num_classes))
        lines.append(f"user-{r}@example.com\t{r % 17}\t{r * 2654435761 % 2**32:08x}\t{label}")
    return lines


def _follower_file(tmp_path) -> str:
    """The follower holds every id (so the intersection is exactly the leader's PSI input), and one more."""
    path = tmp_path / "follower.csv"
    path.write_text("id,I2,C2\n" + "".join(f"user-{r}@example.com,{r % 5},k{r % 9}\n" for r in range(ROWS + 1)))
    return str(path)


def _psi_ids(tmp_path, name: str, lines: list[str], num_classes: int, *flags: str):
    """The ids the follower learns from the PSI with a leader that prepared `lines` (the leader's PSI input is its
    shard's ids, PartyShard.all_ids: leader/psi.intersect), or REFUSED and the one-line error."""
    path = tmp_path / f"{name}.tsv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / name
    code = data_main(
        ["prepare", "--party", "leader", "--input", str(path), "--out", str(out), "--dense", "I1"]
        + ["--categorical", "C1", "--label", "--num-classes", str(num_classes), "--hash-buckets", "50", *flags]
    )
    if code != 0:
        return REFUSED, os.path.exists(out / "leader")
    follower = tmp_path / "follower"
    if not follower.exists():
        fcode = data_main(
            ["prepare", "--party", "follower0", "--input", _follower_file(tmp_path), "--out", str(follower)]
            + ["--dense", "I2", "--categorical", "C2", "--hash-buckets", "50"]
        )
        assert fcode == 0
    ids = np.intersect1d(PartyShard(str(out / "leader")).all_ids(), PartyShard(str(follower / "follower0")).all_ids())
    return ids, True


def _independent_of_labels(valid, spoiled) -> bool:
    """The follower's view of the intersection does not depend on label validity: the spoiled file is refused, or
    gives exactly the ids of the file whose labels are all valid."""
    return spoiled[0] is REFUSED or np.array_equal(spoiled[0], valid[0])


@pytest.mark.parametrize("reader", ["fast", "text"])
@pytest.mark.parametrize("num_classes, domain", [(2, "one of ['0', '1']"), (4, "one of ['0', '1', '2', '3']")])
@pytest.mark.parametrize("flags", [(), ("--strict",)])
def test_a_criteo_party_file_with_blank_or_invalid_labels_is_refused_so_the_intersection_never_depends_on_them(
    tmp_path, capsys, monkeypatch, reader, num_classes, domain, flags
):
    # Prepare: the same leader file with every label valid, and with 23 rows' labels blank or invalid
    if reader == "text":
        monkeypatch.setattr(arrow_text, "ENABLED", False)
    valid_lines = _criteo_rows(num_classes, {})
    spoiled_lines = _criteo_rows(num_classes, SPOILED)
    # Execute
    valid = _psi_ids(tmp_path, "valid", valid_lines, num_classes, *flags)
    capsys.readouterr()
    spoiled = _psi_ids(tmp_path, "spoiled", spoiled_lines, num_classes, *flags)
    err = capsys.readouterr().err.strip()
    # Assert: every row of the valid file enters the PSI; the spoiled file is refused, in one line, nothing written
    assert valid[0] is not REFUSED and valid[0].size == ROWS
    assert _independent_of_labels(valid, spoiled)
    assert spoiled == (REFUSED, False), spoiled
    rows = sorted(SPOILED)
    first = ", ".join(f"line {r + 2}" for r in rows[:5])
    assert "\n" not in err and err.startswith("error: "), err
    assert f"line {rows[0] + 2}: label 'label' is '', not {domain}" in err, err
    assert f"{len(SPOILED)} row(s) in all have a blank or invalid label ({first}, ...)" in err, err
    assert "private set intersection" in err and "run without --strict" not in err


def test_the_independence_check_catches_a_leader_that_drops_the_rows_without_a_valid_label(tmp_path, capsys):
    # Prepare: the planted leak, the old reader's behaviour: the rows with a blank or invalid label left out before
    # the shard is written (as a leader that filters its file by label would)
    valid_lines = _criteo_rows(2, {})
    dropped_lines = [line for k, line in enumerate(_criteo_rows(2, {})) if k - 1 not in SPOILED]
    # Execute
    valid = _psi_ids(tmp_path, "valid", valid_lines, 2)
    dropped = _psi_ids(tmp_path, "dropped", dropped_lines, 2)
    # Assert (power): the follower would learn exactly which ids lack a valid label, and the check sees it
    assert dropped[0] is not REFUSED and dropped[0].size == ROWS - len(SPOILED)
    assert not _independent_of_labels(valid, dropped)


LEADER = {
    "role": "leader",
    "party": "leader",
    "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
    "data": {"path": "unused", "schema": {"id": "cust", "columns": {"age": "numeric", "city": "categorical"}}},
}
TABLE_CASES = [
    # task, label spec, a valid label of row r, the spoiled labels, the domain the refusal names, the first value
    ("binary", {"column": "y", "classes": ["no", "yes"]}, lambda r: "yes" if r % 3 else "no", ["", "NA", "maybe"],
     "one of ['no', 'yes'] (binary task)", "''"),
    ("multiclass", {"column": "y"}, lambda r: str(r % 4), ["", " "], None, "''"),
    ("regression", {"column": "y"}, lambda r: f"{r * 0.5:.1f}", ["", "NA", "abc"],
     "a finite number (regression task)", "missing or not a number"),
]  # fmt: skip


@pytest.mark.parametrize("reader", ["fast", "text"])
@pytest.mark.parametrize("task, label, value, bad, domain, first_value", TABLE_CASES, ids=[c[0] for c in TABLE_CASES])
def test_a_table_with_blank_or_invalid_labels_is_refused_counting_them_and_naming_the_first_lines(
    tmp_path, capsys, monkeypatch, reader, task, label, value, bad, domain, first_value
):
    # Prepare: the leader's table under its schema, 30 of 300 rows with a blank or invalid label
    if reader == "text":
        monkeypatch.setattr(arrow_text, "ENABLED", False)
    doc = {**LEADER, "data": {**LEADER["data"], "schema": {**LEADER["data"]["schema"], "label": label}}}
    doc["train"] = {"task": task}
    spoiled = {r: bad[k % len(bad)] for k, r in enumerate(range(7, ROWS, 10))}
    rows = "".join(f"c{r},{20 + r % 30},{'ab'[r % 2]},{spoiled.get(r, value(r))}\n" for r in range(ROWS))
    (tmp_path / "leader.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "t.csv").write_text("cust,age,city,y\n" + rows)
    # Execute
    code = data_main(
        ["prepare", "--config", str(tmp_path / "leader.yaml"), "--input", str(tmp_path / "t.csv")]
        + ["--out", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    # Assert: one line counting the rows and naming the first five lines; no shard, so no PSI input
    first = sorted(spoiled)
    assert code == 2 and len(err) == 1, err
    assert f"line {first[0] + 2}: label 'y' is {first_value}, not {domain or 'one of'}" in err[0], err
    assert f"{len(spoiled)} row(s) in all have a blank or invalid label" in err[0], err
    assert ", ".join(f"line {r + 2}" for r in first[:5]) + ", ...)" in err[0], err
    assert not (tmp_path / "out" / "leader").exists()
