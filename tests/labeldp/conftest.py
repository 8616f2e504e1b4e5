"""The label-DP tests' shared fixture: the 40k-row shards the follower-view attacks run on, built once a session."""

from __future__ import annotations

import pytest

from tests.support.attack_shards import write_attack_shards


@pytest.fixture(scope="session")
def shards_40k(tmp_path_factory):
    """40k synthetic rows (secret labels), default two-party shards (tests/support/attack_shards.py)."""
    return write_attack_shards(tmp_path_factory.mktemp("attack_shards"))
