"""The data layer's one error: input that cannot be used, with a message naming the file, the value and the domain."""

from __future__ import annotations


class DataError(ValueError):
    """Input data that cannot be used; the message names the file and what is wrong."""
