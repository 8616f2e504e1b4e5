"""torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), read and checked without importing torch.

Rank-to-rank traffic inside a party (torch.distributed's store, gloo's pairs) is neither authenticated nor encrypted,
and the installed torch has no gloo TLS transport: ranks beyond this machine's loopback are refused unless the user
states that the network between the party's machines is trusted (TRUSTED_ENV=1; the scripts' --trusted-rank-network).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

MAX_RANKS = 4096
TRUSTED_ENV = "VFL_TRUSTED_RANK_NETWORK"
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
LOOPBACK_INTERFACES = frozenset({"lo", "lo0"})  # Linux, macOS
HOW_TO_TRUST = (
    f"torch.distributed's store and gloo are neither authenticated nor encrypted; on a network that only this "
    f"party's machines can reach, state it with --trusted-rank-network (scripts) or {TRUSTED_ENV}=1 "
    f"(see docs/scaling.md)"
)


class LaunchError(ValueError):
    """torchrun's environment variables are missing, malformed or inconsistent."""


@dataclass(frozen=True)
class RankEnv:
    """Where this process stands among its party's ranks."""

    rank: int = 0
    ranks: int = 1
    local_rank: int = 0
    local_ranks: int = 1
    trusted_network: bool = False

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
    trusted = trusted_network(env)
    if not trusted:
        check_loopback(env, ranks)
    return RankEnv(rank, ranks, local_rank, local_ranks, trusted)


def trusted_network(env: dict) -> bool:
    """Whether the user stated that the party's rank-to-rank network is trusted (TRUSTED_ENV=1)."""
    text = env.get(TRUSTED_ENV, "")
    if text not in ("", "0", "1"):
        raise LaunchError(f"{TRUSTED_ENV}={text[:40]!r}: allowed: 1 (the rank network is trusted), 0 or unset")
    return text == "1"


def is_loopback_address(host: str) -> bool:
    """host is 'localhost' or a loopback IP literal (127.0.0.0/8, ::1); any other name or address is not."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_interface() -> str | None:
    """This machine's loopback interface name ('lo' on Linux, 'lo0' on macOS), None when neither is listed."""
    import socket

    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((n for n in sorted(LOOPBACK_INTERFACES) if n in names), None)


def check_loopback(env: dict, ranks: int) -> None:
    """LaunchError (one line) unless all of the party's ranks and their traffic stay on this machine's loopback."""
    addr = env.get("MASTER_ADDR", "")
    if not is_loopback_address(addr):
        raise LaunchError(f"MASTER_ADDR={addr[:80]!r} is not a loopback address: {HOW_TO_TRUST}")
    local = env.get("LOCAL_WORLD_SIZE")
    if local and local.isdigit() and int(local) < ranks:
        raise LaunchError(
            f"WORLD_SIZE={ranks} with LOCAL_WORLD_SIZE={local}: ranks on several machines: {HOW_TO_TRUST}"
        )
    interfaces = [i.strip() for i in env.get("GLOO_SOCKET_IFNAME", "").split(",") if i.strip()]
    outside = [i for i in interfaces if i not in LOOPBACK_INTERFACES]
    if outside:
        raise LaunchError(f"GLOO_SOCKET_IFNAME={outside[0][:40]!r} is not a loopback interface: {HOW_TO_TRUST}")


def main() -> int:
    """`python -m vfl.distributed.launch`: check this environment as a rank would; one `error:` line and 2 if refused."""
    import sys

    try:
        rank_env()
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
