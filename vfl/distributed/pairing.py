"""Rank-to-rank pairing across parties: one endpoint (port) per rank, and the HELLO/WELCOME fields that check it.

Rank r of the leader binds the configured port + r and serves rank r of every follower on that port.
One port per rank (rather than one ROUTER with rank-qualified identities) because each rank is its own
process, possibly on its own machine: a shared ROUTER would need one process to own the socket and relay
every cut, a hop and a bottleneck, and it could not span machines. Each rank's channel is a full CurveZMQ
session with the party's own key (vfl/wire/leader_channel.py), so the admission and the one-connection-per-party
rule hold per rank, and a follower rank that reaches another rank's port is refused by the handshake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl.distributed.launch import RankEnv

if TYPE_CHECKING:
    from vfl.wire.messages import Hello, Welcome


def rank_endpoint(endpoint: str, rank: int, ranks: int, explicit: tuple[str, ...] = ()) -> str:
    """tcp://HOST:PORT+rank, or explicit[rank] when the follower lists one endpoint per leader rank."""
    if ranks == 1:
        return endpoint
    if explicit:
        if len(explicit) != ranks:
            raise ValueError(f"network.rank_endpoints lists {len(explicit)} endpoints but the party runs {ranks} ranks")
        return explicit[rank]
    host, port = endpoint.rsplit(":", 1)
    last = int(port) + ranks - 1
    if last > 65535:
        raise ValueError(f"{endpoint} with {ranks} ranks needs ports {port}..{last}; the last is above 65535")
    return f"{host}:{int(port) + rank}"


def rank_meta(env: RankEnv) -> dict:
    """The rank fields of a HELLO or WELCOME (none for one rank: the N = 1 messages are unchanged)."""
    return {"rank": env.rank, "ranks": env.ranks} if env.distributed else {}


def rank_problems(peer: str, theirs: Hello | Welcome, env: RankEnv, my_role: str = "the leader") -> list[str]:
    """Disagreements on N or on the pairing between a peer's HELLO or WELCOME (vfl/wire/messages.py, which checks
    that rank and ranks are integers that come together) and this rank, as sentences. No rank fields: one rank."""
    n = theirs.ranks if theirs.ranks is not None else 1
    r = theirs.rank if theirs.rank is not None else 0
    if n != env.ranks:
        return [f"{peer} runs {n} rank(s) but {my_role} runs {env.ranks}; start every party with the same --ranks"]
    if r != env.rank:
        return [
            f"{peer}'s rank {r} reached rank {env.rank} of {my_role}; rank r must pair with rank r (check the "
            f"port of each rank: the base port + r, or network.rank_endpoints)"
        ]
    return []
