"""Raw input that is not Criteo TSV (one endless line, a fake or truncated .gz) ends in one line, in bounded memory."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

from tests.support.criteo_lines import raw_line
from tests.support.paths import REPO


def _prepare(path, out) -> subprocess.CompletedProcess:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking (large) test process
    code = (
        "import runpy, sys\n"
        "sys.argv = ['vfl.data', 'prepare', '--input', sys.argv[1], '--out', sys.argv[2]]\n"
        "try:\n    runpy.run_module('vfl.data', run_name='__main__')\n"
        "finally:\n    hwm = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
        "    print('maxrss_kib', hwm, file=sys.stderr)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), str(out)], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def _rss_kib(stderr: str) -> int:
    return int(stderr.rsplit("maxrss_kib", 1)[1].split()[0])


def test_a_huge_line_without_newline_is_refused_in_bounded_memory(tmp_path):
    # Prepare: 64 MiB with no newline at all
    path = tmp_path / "one_line.tsv"
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(b"a" * (1 << 20))
    # Execute
    r = _prepare(path, tmp_path / "out")
    # Assert: named, one line, and the reader never held the whole line
    assert r.returncode != 0 and "line 1 is longer than 1048576 bytes" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if not ln.startswith("maxrss_kib")]) == 1, r.stderr
    assert _rss_kib(r.stderr) < 56 * 1024  # measured 34 MiB; holding the line alone would take 64


@pytest.mark.parametrize("kind", ["fake", "truncated"])
def test_a_broken_gz_is_a_one_line_error(tmp_path, kind):
    # Prepare
    path = tmp_path / "data.tsv.gz"
    if kind == "fake":
        path.write_bytes(b"this is not gzip at all\n" * 100)
    else:
        blob = gzip.compress(("\n".join(raw_line(label=str(i % 2)) for i in range(3000)) + "\n").encode())
        path.write_bytes(blob[: len(blob) // 2])
    # Execute
    r = _prepare(path, tmp_path / "out")
    # Assert
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("maxrss_kib")]
    assert r.returncode != 0 and "not a readable gzip file" in r.stderr and len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
