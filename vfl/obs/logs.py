"""Run logs through the stdlib `logging` module: plain lines on the console, timestamped lines in the party's file.

The console shows INFO lines exactly as written (the seed's loss lines, `epoch 0 step 100/782 loss:
0.412345`, stay parseable) on stdout and warnings/errors on stderr; `--quiet` keeps warnings and
errors only, `--verbose` adds DEBUG lines and timestamps. The file (`<out>/<party>.log`) gets every
line at DEBUG and above as `2026-11-23T18:40:01.123 INFO message`. Lines are written around any
progress bar (tqdm) so bars and logs never overwrite each other.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time

_console_level = logging.INFO
_ids = itertools.count()
FILE_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"


def set_verbosity(quiet: bool = False, verbose: bool = False) -> int:
    """The console level of every RunLog made after this call (and of the `vfl` logger): WARNING, INFO or DEBUG."""
    global _console_level
    _console_level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.getLogger("vfl").setLevel(min(_console_level, logging.INFO))
    return _console_level


def console_level() -> int:
    return _console_level


class _Console(logging.Handler):
    """INFO and below to stdout, WARNING and above to stderr, flushed at once, written around progress bars."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        try:
            text = self.format(record)
            try:
                from tqdm import tqdm

                with tqdm.external_write_mode(file=stream):
                    stream.write(text + "\n")
                    stream.flush()
            except ImportError:  # pragma: no cover - tqdm is a dependency
                stream.write(text + "\n")
                stream.flush()
        except Exception:  # never let logging kill a run
            self.handleError(record)


class _FileOnly(logging.Filter):
    """Records marked file_only stay out of the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "file_only", False)


class RunLog:
    """One party's log: `log(line)` is INFO; `log.warning`, `log.error`, `log.debug`; `log.file_only(text)`."""

    def __init__(self, path: str | None, name: str = "run"):
        self.t0 = time.perf_counter()
        self.path = path
        self.logger = logging.getLogger(f"vfl.run.{name}.{next(_ids)}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        console = _Console(level=_console_level)
        console.setFormatter(
            logging.Formatter(FILE_FORMAT if _console_level <= logging.DEBUG else "%(message)s", DATE_FORMAT)
        )
        console.addFilter(_FileOnly())
        self.logger.addHandler(console)
        self._file = None
        if path:
            self._file = logging.FileHandler(path, mode="a", encoding="utf-8")
            self._file.setLevel(logging.DEBUG)
            self._file.setFormatter(logging.Formatter(FILE_FORMAT, DATE_FORMAT))
            self.logger.addHandler(self._file)

    def __call__(self, line: str) -> None:
        self.logger.info(line)
        self._flush()

    def info(self, line: str) -> None:
        self(line)

    def debug(self, line: str) -> None:
        self.logger.debug(line)

    def warning(self, line: str) -> None:
        self.logger.warning(line)
        self._flush()

    def error(self, line: str) -> None:
        self.logger.error(line)
        self._flush()

    def file_only(self, text: str) -> None:
        """Details for the log file only (a traceback), never the one-line console error."""
        self.logger.debug(text.rstrip("\n"), extra={"file_only": True})
        self._flush()

    def _flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        for h in list(self.logger.handlers):
            h.close()
            self.logger.removeHandler(h)


def message_of(file_line: str) -> str:
    """The message of a log-file line (without its timestamp and level)."""
    parts = file_line.split(" ", 2)
    return parts[2] if len(parts) == 3 and parts[1] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") else file_line
