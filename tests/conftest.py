"""Shared fixtures: paths to the real Criteo sample, small synthetic data sets and prepared shards."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.support.paths import REPO

SHARED_DATA = REPO.parent / "shared" / "data"
# The test data's true labels are fixed (one label seed), so every assertion on a trained model (AUC floors,
# split == centralized) sees the same true labels in every session; label-DP runs still draw a fresh release (each
# session's key store is new). The front door's data and the follower's full-view attack tests (tests/labeldp's 40k
# attack shards, tests/support/attack_shards.py) keep a secret label seed, as a follower must not be able to
# regenerate the labels it attacks; the direction attacks on shards_small score gradients against labels, and read no
# seed.
TEST_LABEL_SEED = 20261124
REAL_1K = SHARED_DATA / "criteo_raw_1k.tsv"


def pytest_configure(config):
    """Every `python -m` party process the tests start through vfl/local_parties.py (Procs, the Python API) is a fork
    of a server that loaded torch once (tests/support/fork_server.py; VFL_TEST_FORK_SERVER=0: fresh interpreters).
    The test process computes on one torch thread, as every party process of the tests does (train.threads 1): the
    suite runs one worker per core, and two workers' intra-op threads on two cores wait on each other (200 Adam steps
    of a 2000-row top took 9 s on two threads under load against 0.2 s on one)."""
    import torch

    from tests.support.fork_server import popen
    from vfl.local_parties import LocalParties

    torch.set_num_threads(1)
    LocalParties.process_factory = staticmethod(popen)


@pytest.fixture(scope="session", autouse=True)
def label_dp_store(tmp_path_factory) -> pathlib.Path:
    """Every test (and every process it starts) keeps label-DP keys and ledgers in a private temporary
    store, never in the user's home."""
    store = tmp_path_factory.mktemp("label_dp_store")
    os.environ["VFL_LABEL_DP_STORE"] = str(store)
    return store


@pytest.fixture(scope="session")
def real_1k() -> pathlib.Path:
    if not REAL_1K.exists():
        pytest.skip(f"real Criteo sample absent: {REAL_1K}")
    return REAL_1K


@pytest.fixture(scope="session")
def synth_small(tmp_path_factory) -> pathlib.Path:
    """12k synthetic rows (feature seed 7, label seed TEST_LABEL_SEED) with truth file."""
    from vfl.data.synth.criteo import write_synthetic

    out = tmp_path_factory.mktemp("synth") / "small.tsv"
    write_synthetic(str(out), 12_000, seed=7, max_vocab=2_000, label_seed=TEST_LABEL_SEED)
    return out


@pytest.fixture(scope="session")
def synth_tiny(tmp_path_factory) -> pathlib.Path:
    """3k synthetic rows with truth file: the front-door script tests (each run pays PSI and two preparations)."""
    from vfl.data.synth.criteo import write_synthetic

    out = tmp_path_factory.mktemp("synth_tiny") / "tiny.tsv"
    write_synthetic(str(out), 3_000, seed=7, max_vocab=500, label_seed=TEST_LABEL_SEED)
    return out


@pytest.fixture(scope="session")
def shards_small(synth_small, tmp_path_factory) -> pathlib.Path:
    """Default two-party shards of synth_small, 2000 hash buckets per field."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    out = tmp_path_factory.mktemp("shards") / "criteo"
    prepare(str(synth_small), str(out), load_parties(None), PrepareOptions(hash_buckets=2_000, seed=0))
    return out


@pytest.fixture
def procs():
    """Real party processes, killed by PID when the test ends."""
    from tests.support.party_processes import Procs

    p = Procs()
    yield p
    p.cleanup()


@pytest.fixture(scope="session")
def shards_three(synth_small, tmp_path_factory) -> pathlib.Path:
    """synth_small split across a leader and two followers."""
    from vfl.data.parties import parse_parties
    from vfl.data.prepare import PrepareOptions, prepare

    doc = {
        "leader": {"dense": ["I1", "I2", "I3", "I4"], "categorical": [f"C{i}" for i in range(1, 10)], "label": True},
        "follower0": {"dense": ["I5", "I6", "I7", "I8"], "categorical": [f"C{i}" for i in range(10, 19)]},
        "follower1": {"dense": ["I9", "I10", "I11", "I12", "I13"], "categorical": [f"C{i}" for i in range(19, 27)]},
    }
    out = tmp_path_factory.mktemp("shards3") / "criteo"
    prepare(str(synth_small), str(out), parse_parties(doc), PrepareOptions(hash_buckets=2_000))
    return out


@pytest.fixture(scope="session")
def shards_k10(tmp_path_factory) -> pathlib.Path:
    """6k synthetic 10-class rows (feature seed 7, label seed TEST_LABEL_SEED), prepared with --num-classes 10."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.synth.multiclass import write_synthetic_multiclass

    raw = tmp_path_factory.mktemp("synth10") / "k10.tsv"
    write_synthetic_multiclass(str(raw), 6_000, 10, seed=7, max_vocab=2_000, label_seed=TEST_LABEL_SEED)
    out = tmp_path_factory.mktemp("shards10") / "k10"
    prepare(str(raw), str(out), load_parties(None), PrepareOptions(hash_buckets=2_000, num_classes=10))
    return out


@pytest.fixture(scope="session")
def vertical_raw(synth_small, tmp_path_factory) -> dict:
    """Two organisations' own raw files cut from synth_small: overlapping but unequal id sets, ids as e-mail
    strings and as integers, each file in its own shuffled order; the leader's in TSV, the follower's in CSV.
    Returns {"dir", "leader", "follower0", "common"} (common: the ids both hold, as texts)."""
    import pandas as pd

    from vfl.data.parties import load_parties
    from vfl.data.raw_split import split_raw

    root = tmp_path_factory.mktemp("vertical")
    split_raw(str(synth_small), str(root / "cut"), load_parties(None))
    lead = pd.read_csv(root / "cut/leader.tsv", sep="\t", dtype=str, keep_default_na=False)
    fol = pd.read_csv(root / "cut/follower0.tsv", sep="\t", dtype=str, keep_default_na=False)

    def rename(i: str) -> str:
        return f"user-{i}@example.com" if int(i) % 2 == 0 else str(int(i) + 10**12)

    lead["id"], fol["id"] = lead["id"].map(rename), fol["id"].map(rename)
    n = len(lead)
    lead = lead.iloc[: int(n * 0.9)].sample(frac=1.0, random_state=1)  # rows 0 .. 0.9 n
    fol = fol.iloc[int(n * 0.15) :].sample(frac=1.0, random_state=2)  # rows 0.15 n .. n
    (root / "own").mkdir()
    lead.to_csv(root / "own/leader.tsv", sep="\t", index=False)
    fol.to_csv(root / "own/follower0.csv", sep=",", index=False)
    common = sorted(set(lead["id"]) & set(fol["id"]))
    return {
        "dir": root / "own",
        "leader": root / "own/leader.tsv",
        "follower0": root / "own/follower0.csv",
        "common": common,
    }


@pytest.fixture(scope="session")
def vertical_shards(vertical_raw, tmp_path_factory) -> pathlib.Path:
    """Each party's shard prepared from its own file alone (2000 hash buckets)."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare_party

    out = tmp_path_factory.mktemp("vshards")
    for p in load_parties(None):
        prepare_party(str(vertical_raw[p.name]), str(out / p.name), p, PrepareOptions(hash_buckets=2_000))
    return out
