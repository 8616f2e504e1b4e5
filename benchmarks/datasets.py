"""The benches' data: the one cache of synthetic Criteo files, their parties' shards, the examples' parties.

A synthetic file is kept when it and its truth file (`vfl.data.synth.criteo.write_synthetic` renames both into
place together, after the rows are complete) are both there; otherwise it is written anew with the given seeds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from benchmarks.common import say

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthetic_criteo(
    rows: int, path: str | None = None, seed: int = 0, label_seed: int | None = None, max_vocab: int = 20_000
) -> str:
    """The synthetic Criteo-format file of `rows` rows at path (default data/synthetic/criteo_synth_ROWS.tsv, the
    front door's), written with these seeds unless it and its truth file are already there; returns its path."""
    path = path or os.path.join(REPO, "data", "synthetic", f"criteo_synth_{rows}.tsv")
    if not (os.path.exists(path) and os.path.exists(path + ".truth.npy")):
        from vfl.data.synth.criteo import write_synthetic

        say(f"== synthesizing {rows} rows -> {path}")
        write_synthetic(path, rows, seed=seed, max_vocab=max_vocab, label_seed=label_seed)
    return path


def criteo_shards(py: str, rows: int, shards: str, flags: list[str], note: str) -> str:
    """The default Criteo split's shards (leader, follower0) of the cached synthetic rows (synthetic_criteo), each
    party's file prepared by `vfl.data prepare` with flags; `note` is said between the two steps."""
    data = synthetic_criteo(rows)
    say(note)
    subprocess.run(
        [py, "-m", "vfl.data", "prepare", "--input", data, "--out", shards, *flags],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return shards


def example_parties(name: str):
    """examples/NAME/make_parties.py as a module (the examples are scripts, not a package): its parties, their raw
    files and the example's data files."""
    path = os.path.join(REPO, "examples", name, "make_parties.py")
    spec = importlib.util.spec_from_file_location(f"make_parties_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare_flights(work: str, rows: int, shards: str, py: str | None = None) -> dict[str, str]:
    """examples/flights' parties (make_parties.py's raw files) on the flights whose id falls in a public 1-in-N sample
    of about `rows` (every party keeps the same ids, so the intersection shrinks with them), each prepared alone into
    `shards` by its example config. Returns {party: its example config}, the leader (airline) first."""
    import pandas as pd

    examples = os.path.join(REPO, "examples", "flights")
    make_parties = example_parties("flights")
    files, keep, configs = make_parties.main(os.path.join(work, "flights_raw")), None, {}
    for party in make_parties.PARTIES:
        table = pd.read_csv(files[party], dtype={"id": str})
        if keep is None:  # the airline's ids: a fixed fraction by a public hash of the id
            h = pd.util.hash_pandas_object(table["id"], index=False).to_numpy()
            keep = set(table["id"][(h % 10_000) < min(1.0, rows / len(table)) * 10_000])
        path = os.path.join(work, f"flights_{party}.csv")
        table[table["id"].isin(keep)].to_csv(path, index=False)
        configs[party] = os.path.join(examples, f"{party}.yaml")
        cmd = [py or sys.executable, "-m", "vfl.data", "prepare", "--config", configs[party], "--input", path]
        subprocess.run([*cmd, "--out", shards, "--force"], check=True, cwd=REPO, capture_output=True)
    return configs
