"""Build each party's own raw CSV of the caravan example from the installed `ISLP` package (two parties).

ISLP's `Caravan` (5,822 customers of a Dutch insurer, CoIL 2000): the first 43 columns are socio-demographic
figures of the customer's zip code, the other 42 the customer's product ownership; `Purchase` (Yes / No) says
whether the customer bought a caravan policy.

- insurer (leader): the product-ownership columns (P* contribution levels, A* numbers of policies) and the label
  `Purchase` (classes [No, Yes]).
- broker (follower): a data broker's socio-demographic columns (MOSTYPE .. MKOOPKLA).

Every file has the column `id`, a customer number (`c00001` ..) that both parties would hold.

    python examples/caravan/make_parties.py --out runs/caravan/raw
"""

from __future__ import annotations

import argparse
import pathlib

import pandas as pd

LEADER = "insurer"
PARTIES = (LEADER, "broker")
LABEL = "Purchase"
SOCIO_DEMOGRAPHIC = 43  # the first 43 columns (zip-code statistics); the rest is product ownership


def load_caravan() -> pd.DataFrame:
    try:
        from ISLP import load_data
    except ImportError as e:
        raise SystemExit(f"ISLP is not importable ({e}): run `bash scripts/setup_examples.sh`") from e
    return load_data("Caravan")


def party_frames() -> dict[str, pd.DataFrame]:
    """Each party's own table (column `id` first)."""
    data = load_caravan()
    data.insert(0, "id", [f"c{i + 1:05d}" for i in range(len(data))])
    features = [c for c in data.columns if c not in ("id", LABEL)]
    broker, insurer = features[:SOCIO_DEMOGRAPHIC], features[SOCIO_DEMOGRAPHIC:]
    return {
        LEADER: data[["id", *insurer, LABEL]].astype({LABEL: str}),
        "broker": data[["id", *broker]],
    }


def main(out_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Write OUT/<party>.csv for every party; returns {party: path}."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for party, frame in party_frames().items():
        paths[party] = out / f"{party}.csv"
        frame.to_csv(paths[party], index=False)
    return paths


def _cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for <party>.csv (never commit it: use runs/...)")
    args = ap.parse_args()
    for party, path in main(args.out).items():
        rows = sum(1 for _ in open(path)) - 1
        print(f"{party}: {path} ({rows} rows)")


if __name__ == "__main__":
    _cli()
