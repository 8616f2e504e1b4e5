"""The leader's and the follower's trainers joined by an in-memory channel pair, the follower in a thread.

Also what the tests of them plant or record: a tampering peer, the gradients a bottom receives, changed parameters."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import torch

from tests.support.memory_channels import TIMEOUT_S, MemoryFollowerChannel, MemoryLeaderChannel, _Queues
from tests.support.party_processes import party_configs
from vfl.wire import PeerAbort
from vfl.wire.messages import Abort, Embedding, WireMessage


class Session:
    """A leader and one follower trainer on restricted shards of `shards`, the follower in a thread. `holds` maps
    a party to the ids its shard is restricted to instead (a forged intersection: parties that disagree)."""

    def __init__(self, tmp_path, shards, holds: dict[str, np.ndarray] | None = None, **config):
        from follower.trainer import FollowerTrainer
        from leader.trainer import LeaderTrainer
        from vfl.config.schema import load_config
        from vfl.obs.metrics import RunLog

        paths = party_configs(str(tmp_path), str(shards), **config)
        self.cfgs = {name: load_config(path) for name, path in paths.items()}
        self.parties = {name: self.bottom(name, (holds or {}).get(name)) for name in self.cfgs}
        queues = _Queues(("follower0",))
        self.posted = queues.posted
        self.leader_ch = MemoryLeaderChannel("leader", queues)
        self.follower_ch = MemoryFollowerChannel("follower0", queues)
        out = str(tmp_path / "out")
        self.leader = LeaderTrainer(
            self.cfgs["leader"],
            self.leader_ch,
            self.parties["leader"],
            RunLog(str(tmp_path / "leader.log"), "leader"),
            out,
        )
        self.follower = FollowerTrainer(
            self.cfgs["follower0"],
            self.follower_ch,
            self.parties["follower0"],
            RunLog(str(tmp_path / "follower0.log"), "follower0"),
            out,
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._follow, name="follower0", daemon=True)

    def bottom(self, name: str, keep: np.ndarray | None = None):
        """A fresh bottom of party `name` on its shard restricted to the ids every party holds (as after PSI), or to
        `keep`."""
        from vfl.data.shards import PartyShard
        from vfl.training.party import BottomParty

        shards = {n: PartyShard(c.data.path) for n, c in self.cfgs.items()}
        common = np.intersect1d(*[s.all_ids() for s in shards.values()])
        shards[name].restrict(common if keep is None else keep)
        return BottomParty(self.cfgs[name], shards[name], torch.device("cpu"))

    def _follow(self) -> None:
        try:
            self.follower.handshake()
            self.follower.run()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e
            if not isinstance(e, PeerAbort):  # as vfl.cli.run_party: the leader is told why
                self.follower_ch.post(Abort(f"follower0: {e}"))

    def __enter__(self) -> Session:
        self.thread.start()
        self.leader.handshake()
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # the leader failed: the follower is told, as vfl.cli.run_party tells it
            self.leader_ch.abort_all(f"test failed: {exc[1]}")
        self.thread.join(TIMEOUT_S + 5)
        assert not self.thread.is_alive(), "the follower thread did not end"
        if exc[0] is None and self.error is not None:
            raise self.error

    def sent(self, sender: str, cls: type[WireMessage]) -> list:
        """The messages of class `cls` that `sender` posted, in order."""
        return [m for s, _, m in self.posted if s == sender and isinstance(m, cls)]


def record_gradients(party) -> list[torch.Tensor]:
    """Every gradient that reaches this bottom's backward pass, in order."""
    got: list[torch.Tensor] = []
    accumulate = party.accumulate_gradient

    def record(grad: torch.Tensor, part: int = 0) -> None:
        got.append(grad.detach().clone())
        accumulate(grad, part)

    party.accumulate_gradient = record
    return got


def parameters_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def changed(before: list[torch.Tensor], model: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def tamper(channel, cls: type[WireMessage], **change) -> None:
    """Make `channel` post every message of class `cls` with the fields in `change` replaced (a malicious peer)."""
    post = channel.post

    def tampered(*args) -> None:
        *peer, message = args
        post(*peer, dataclasses.replace(message, **change) if isinstance(message, cls) else message)

    channel.post = tampered


def eval_cuts(s: Session) -> list:
    """The EMBEDDINGs of EVAL ranges that the follower posted."""
    return [c for c in s.sent("follower0", Embedding) if c.eval is not None]
