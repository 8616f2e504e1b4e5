"""N ranks per party as real processes: torchrun's environment for each rank, and every rank of every party started."""

from __future__ import annotations

from tests.support.party_processes import free_port


def rank_env(rank: int, ranks: int, master_port: int) -> dict:
    """What torchrun sets for each rank of one party on one machine."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(ranks),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(ranks),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "OMP_NUM_THREADS": "1",
    }


def start_ranks(procs, cfgs: dict[str, str], ranks: int) -> list[str]:
    """Every rank of every party as its own process (leader ranks first); their names."""
    names = []
    for party, path in cfgs.items():
        master = free_port()
        for r in range(ranks):
            name = f"{party}.{r}"
            procs.start(name, "leader" if party == "leader" else "follower", path, env=rank_env(r, ranks, master))
            names.append(name)
    return names
