"""The repository's root, for tests that read its files or run its scripts."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
