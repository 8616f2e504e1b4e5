"""torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), read and checked without importing torch."""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_RANKS = 4096


class LaunchError(ValueError):
    """torchrun's environment variables are missing, malformed or inconsistent."""


@dataclass(frozen=True)
class RankEnv:
    """Where this process stands among its party's ranks."""

    rank: int = 0
    ranks: int = 1
    local_rank: int = 0
    local_ranks: int = 1

    @property
    def distributed(self) -> bool:
        return self.ranks > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log_name(self, party: str) -> str:
        """The run log's file name: <party>.log for rank 0, <party>.rank<r>.log for the others."""
        return f"{party}.log" if self.rank == 0 else f"{party}.rank{self.rank}.log"


def _int(env: dict, name: str, default: int | None, lo: int, hi: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        if default is None:
            raise LaunchError(
                f"{name} is not set; start every rank with torchrun (it sets RANK, WORLD_SIZE, "
                f"MASTER_ADDR and MASTER_PORT), or set none of them for one rank"
            )
        return default
    try:
        value = int(text)
    except ValueError:
        raise LaunchError(f"{name}={text[:40]!r} is not an integer") from None
    if not lo <= value <= hi:
        raise LaunchError(f"{name}={value} is outside [{lo}, {hi}]")
    return value


def rank_env(env: dict | None = None) -> RankEnv:
    """The ranks of this party from torchrun's variables; RankEnv() (one rank) when WORLD_SIZE is unset or 1."""
    env = os.environ if env is None else env
    ranks = _int(env, "WORLD_SIZE", 1, 1, MAX_RANKS)
    if ranks == 1:
        return RankEnv()
    rank = _int(env, "RANK", None, 0, ranks - 1)
    local_ranks = _int(env, "LOCAL_WORLD_SIZE", 1, 1, ranks)
    local_rank = _int(env, "LOCAL_RANK", 0, 0, local_ranks - 1)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise LaunchError(
                f"WORLD_SIZE={ranks} but {name} is not set; start the ranks with torchrun "
                f"(scripts/run_leader.sh / run_follower.sh --ranks N)"
            )
    return RankEnv(rank, ranks, local_rank, local_ranks)
