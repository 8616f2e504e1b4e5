"""What every benchmark reports beside its figures: the machine, its load, the spread over seeds, its JSON file.

The spread over seeds is the sample standard deviation (statistics.stdev: the sum of squared deviations over n - 1),
0.0 for a single seed; `mean_sd` prints a mean and that spread as "mean ± sd".
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import time
from typing import Iterable


def say(line: str) -> None:
    print(line, flush=True)


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo's "model name", else lscpu's "Model name" (ARM), else platform's."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            return m.group(1).strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown CPU"


def load_avg() -> list[float]:
    """The 1, 5 and 15 minute load averages, to 2 decimals."""
    return [round(x, 2) for x in os.getloadavg()]


def load_text() -> str:
    """The load averages as printed: "0.52 0.40 0.33"."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> dict:
    """The CPU model, its core count and the load averages now."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_1_5_15": load_avg()}


def spread(values: Iterable[float]) -> float:
    """The sample standard deviation over seeds (statistics.stdev, n - 1); 0.0 for fewer than two values."""
    values = list(values)
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mean_sd(mean: float, sd: float, digits: int = 4, sign: str = "±") -> str:
    """A mean over seeds and its spread, as "0.7812 ± 0.0031"."""
    return f"{mean:.{digits}f} {sign} {sd:.{digits}f}"


def write_json(path: str, doc, indent: int = 2) -> None:
    """Write doc to path (its directory made), a dict with "machine" (machine() now) added unless it has one."""
    if isinstance(doc, dict) and "machine" not in doc:
        doc = {**doc, "machine": machine()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=indent)
        f.write("\n")


def report_json(path: str, doc, indent: int = 2) -> None:
    """write_json(path, doc), then a line naming the file."""
    write_json(path, doc, indent)
    say(f"wrote {path}")


class RunProgress:
    """A benchmark's progress over `total` runs: `[done/total] WHAT  (R runs/min, ETA S s)`, timed from its start."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def line(self, what: str) -> str:
        """Count one more run done and return its progress line."""
        self.done += 1
        rate = self.done / (time.perf_counter() - self.t0)
        return f"[{self.done}/{self.total}] {what}  ({rate * 60:.1f} runs/min, ETA {(self.total - self.done) / rate:.0f} s)"
