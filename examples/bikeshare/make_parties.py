"""Build each party's own raw CSV of the bikeshare example from the installed `ISLP` package (two parties).

ISLP's `Bikeshare`: 8,645 hours of Capital Bikeshare (Washington DC) in 2011; the target `bikers` is the number of
rentals in the hour (regression). `casual` and `registered` sum to it and stay out of every file.

- operator (leader): the rental operator's calendar columns (season, mnth, day, hr, holiday, weekday, workingday)
  and the label `bikers`.
- weather (follower): a weather service's columns (weathersit, temp, atemp, hum, windspeed), normalised as ISLP
  ships them.

Every file has the column `id`, the hour it describes (`2011-01-01T00`): `day` is the day of the year.

    python examples/bikeshare/make_parties.py --out runs/bikeshare/raw
"""

from __future__ import annotations

import argparse
import pathlib

import pandas as pd

LEADER = "operator"
PARTIES = (LEADER, "weather")
LABEL = "bikers"
YEAR = 2011
OPERATOR_COLUMNS = ["season", "mnth", "day", "hr", "holiday", "weekday", "workingday"]
WEATHER_COLUMNS = ["weathersit", "temp", "atemp", "hum", "windspeed"]
LEFT_OUT = ("casual", "registered")  # they sum to the label


def load_bikeshare() -> pd.DataFrame:
    try:
        from ISLP import load_data
    except ImportError as e:
        raise SystemExit(f"ISLP is not importable ({e}): run `bash scripts/setup_examples.sh`") from e
    return load_data("Bikeshare")


def hour_ids(data: pd.DataFrame) -> pd.Series:
    """The hour a row describes, from the day of the year and the hour: 2011-01-01T00 .."""
    start = pd.Timestamp(f"{YEAR}-01-01")
    when = (
        start
        + pd.to_timedelta(data["day"].astype(int) - 1, unit="D")
        + pd.to_timedelta(data["hr"].astype(int), unit="h")
    )
    return when.dt.strftime("%Y-%m-%dT%H")


def party_frames() -> dict[str, pd.DataFrame]:
    """Each party's own table (column `id` first)."""
    data = load_bikeshare()
    data.insert(0, "id", hour_ids(data))
    return {
        LEADER: data[["id", *OPERATOR_COLUMNS, LABEL]],
        "weather": data[["id", *WEATHER_COLUMNS]],
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
