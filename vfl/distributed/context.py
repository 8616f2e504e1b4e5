"""A party's rank context: the identity for one rank, torch.distributed (gloo / NCCL) collectives for N ranks.

The trainers call the same methods either way. RankContext (N = 1) never imports torch.distributed;
DistributedContext starts the process group from torchrun's environment, wraps trainable modules in
DistributedDataParallel (dense and sparse embedding gradients averaged within the party: gloo all-reduces
sparse tensors), sums the global-batch loss, gathers evaluation outputs, and broadcasts rank 0's model
selection. A collective that fails (a rank died, or the backend's timeout passed) raises RankLost with one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from datetime import timedelta

import numpy as np

from vfl.distributed.launch import RankEnv, loopback_interface
from vfl.distributed.slicing import check_batches, loss_weight, rank_rows, slice_bounds


class RankLost(RuntimeError):
    """A collective within the party failed: another rank stopped, or the distributed timeout passed."""


class RankContext:
    """One rank (N = 1): every method is the identity and nothing distributed is started."""

    env = RankEnv()

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def ranks(self) -> int:
        return self.env.ranks

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return rows

    def loss_weight(self, local_rows: int, global_rows: int) -> float:
        return 1.0

    def global_loss(self, local_mean: float, local_rows: int, global_rows: int) -> float:
        return local_mean

    def eval_range(self, n: int) -> tuple[int, int]:
        return 0, n

    def gather_rows(self, part: np.ndarray, n: int) -> np.ndarray:
        return part

    def agree_selection(self, selection, is_best: bool) -> bool:
        return is_best

    def gather_ids(self, part: np.ndarray) -> np.ndarray:
        """Every rank's int64 ids, concatenated in rank order, on every rank (PSI by bucket: vfl/align/psi)."""
        return part

    def wrap(self, module):
        return module

    def check_batches(self, n_train: int, batch_size: int) -> None:
        check_batches(n_train, batch_size, self.ranks)

    def in_order(self, fn):
        """fn() on rank 0 first, then on the others (creating a shared file once)."""
        return fn()

    def same_on_every_rank(self, what: str, data: bytes) -> list[str]:
        """The sha256 of data on every rank (a list of one here); RankLost when ranks differ."""
        return [hashlib.sha256(data).hexdigest()]

    def per_rank(self, value: float) -> list[float]:
        return [float(value)]

    def total(self, value: float) -> float:
        return float(value)

    @contextlib.contextmanager
    def collectives(self, what: str):
        yield

    def close(self) -> None:
        pass


class DistributedContext(RankContext):
    """N ranks of one party in a torch.distributed process group (env:// from torchrun)."""

    def __init__(self, env: RankEnv, party: str, backend: str, timeout_s: float, device):
        import torch
        import torch.distributed as dist

        self.env = env
        self.party = party
        self.dist = dist
        self.device = device
        self.backend = backend if backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
        if self.backend == "nccl":
            torch.cuda.set_device(env.local_rank)
            self.device = torch.device("cuda", env.local_rank)
        self.timeout_s = timeout_s
        if self.backend == "gloo" and not env.trusted_network and not os.environ.get("GLOO_SOCKET_IFNAME"):
            # an untrusted rank network is this machine's loopback (launch.check_loopback): keep gloo's pairs there too
            interface = loopback_interface()
            if interface:
                os.environ["GLOO_SOCKET_IFNAME"] = interface
        with self.collectives("start-up (init_process_group)"):
            dist.init_process_group(
                self.backend,
                init_method="env://",
                rank=env.rank,
                world_size=env.ranks,
                timeout=timedelta(seconds=timeout_s),
            )

    def _where(self) -> str:
        return f"{self.party} rank {self.rank} of {self.ranks}"

    @contextlib.contextmanager
    def collectives(self, what: str):
        """Turn a failed collective (gloo: connection closed, timeout) into one RankLost line."""
        try:
            yield
        except RankLost:
            raise
        except RuntimeError as e:
            if not _is_distributed_error(e):
                raise
            detail = " ".join(str(e).split())[:300]
            raise RankLost(
                f"{self._where()}: another rank of {self.party} stopped or did not answer within "
                f"distributed.timeout_s={self.timeout_s:g} during {what} ({self.backend}: {detail})"
            ) from None

    def _tensor(self, array):
        import torch

        t = torch.as_tensor(array)
        return t.to(self.device) if self.backend == "nccl" else t

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return rank_rows(rows, self.rank, self.ranks)

    def loss_weight(self, local_rows: int, global_rows: int) -> float:
        return loss_weight(local_rows, global_rows, self.ranks)

    def global_loss(self, local_mean: float, local_rows: int, global_rows: int) -> float:
        """sum_r n_r L_r / B: the mean loss of the whole global batch, the same on every rank."""
        t = self._tensor(np.array([local_mean * local_rows], np.float64))
        with self.collectives("the global-batch loss (all_reduce)"):
            self.dist.all_reduce(t)
        return float(t.cpu()[0]) / global_rows

    def eval_range(self, n: int) -> tuple[int, int]:
        return slice_bounds(n, self.rank, self.ranks)

    def gather_rows(self, part: np.ndarray, n: int) -> np.ndarray:
        """The full (n, ...) array from every rank's contiguous part (eval_range), on every rank."""
        import torch

        longest = -(-n // self.ranks)
        padded = np.zeros((longest, *part.shape[1:]), np.float64)
        padded[: len(part)] = part
        mine = self._tensor(padded)
        parts = [torch.empty_like(mine) for _ in range(self.ranks)]
        with self.collectives("gathering evaluation outputs (all_gather)"):
            self.dist.all_gather(parts, mine)
        out = [
            p.cpu().numpy()[: hi - lo]
            for p, (lo, hi) in ((p, slice_bounds(n, r, self.ranks)) for r, p in enumerate(parts))
        ]
        return np.concatenate(out, axis=0)

    def agree_selection(self, selection, is_best: bool) -> bool:
        """Rank 0's selection state and best-step decision, broadcast to every rank (which adopt it)."""
        s = selection
        state = np.array(
            [
                np.nan if s.best_value is None else s.best_value,
                -1 if s.best_step is None else s.best_step,
                -1 if s.best_epoch is None else s.best_epoch,
                s.evals_without_gain,
                float(is_best),
            ],
            np.float64,
        )
        t = self._tensor(state)
        with self.collectives("broadcasting rank 0's model selection"):
            self.dist.broadcast(t, 0)
        v = t.cpu().numpy()
        s.load_state(
            {
                "best_value": None if np.isnan(v[0]) else float(v[0]),
                "best_step": None if v[1] < 0 else int(v[1]),
                "best_epoch": None if v[2] < 0 else int(v[2]),
                "evals_without_gain": int(v[3]),
            }
        )
        return bool(v[4])

    def gather_ids(self, part: np.ndarray) -> np.ndarray:
        import torch

        sizes = [int(n) for n in self.per_rank(len(part))]
        buf = np.zeros(max(*sizes, 1), np.int64)
        buf[: len(part)] = part
        mine = self._tensor(buf)
        parts = [torch.empty_like(mine) for _ in range(self.ranks)]
        with self.collectives("gathering the ranks' private set intersections"):
            self.dist.all_gather(parts, mine)
        return np.concatenate([p.cpu().numpy()[:n] for p, n in zip(parts, sizes)])

    def wrap(self, module):
        """DistributedDataParallel over the module: dense and sparse (embedding) gradients averaged in the party."""
        from torch.nn.parallel import DistributedDataParallel

        unused = getattr(module, "n_fields", 1) == 0  # a bottom without categorical columns leaves its tables unused
        with self.collectives("wrapping the model (DistributedDataParallel)"):
            return DistributedDataParallel(
                module,
                device_ids=[self.device.index] if self.backend == "nccl" else None,
                find_unused_parameters=unused,
                **_no_buffer_sync(),
            )

    def in_order(self, fn):
        if self.is_main:
            out = fn()
            self._barrier("rank 0 creating shared files")
            return out
        self._barrier("rank 0 creating shared files")
        return fn()

    def _barrier(self, what: str) -> None:
        t = self._tensor(np.zeros(1, np.int64))
        with self.collectives(what):
            self.dist.all_reduce(t)

    def same_on_every_rank(self, what: str, data: bytes) -> list[str]:
        import torch

        digest = hashlib.sha256(data).digest()
        mine = self._tensor(np.frombuffer(digest, np.uint8).copy())
        parts = [torch.empty_like(mine) for _ in range(self.ranks)]
        with self.collectives(f"comparing {what}"):
            self.dist.all_gather(parts, mine)
        hexes = [bytes(p.cpu().numpy()).hex() for p in parts]
        if len(set(hexes)) > 1:
            odd = [r for r, h in enumerate(hexes) if h != hexes[0]]
            raise RankLost(
                f"{self._where()}: {what} differ between ranks (ranks {odd} differ from rank 0); every rank "
                f"of {self.party} must read the same data and keys"
            )
        return hexes

    def per_rank(self, value: float) -> list[float]:
        import torch

        mine = self._tensor(np.array([value], np.float64))
        parts = [torch.empty_like(mine) for _ in range(self.ranks)]
        with self.collectives("gathering per-rank figures"):
            self.dist.all_gather(parts, mine)
        return [float(p.cpu()[0]) for p in parts]

    def total(self, value: float) -> float:
        return float(sum(self.per_rank(value)))

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def release_process_group() -> None:
    """Free the process group and DistributedDataParallel's reducers while the interpreter is still alive.

    DDP's reducer sits in reference cycles that only the garbage collector frees; when that happens during interpreter
    finalization, gloo's worker threads are torn down unjoined and the process aborts ("terminate called without an
    active exception", SIGABRT) after its work is done: about 1 run in 8 with 2 ranks on 2 cores. Called once per
    party process on its way out (vfl.cli.run_party), on success and on error alike; a no-op where torch.distributed
    was never imported or started.
    """
    import gc
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()  # local in gloo (tested with a dead and a stalled peer rank: no wait)
    gc.collect()


def _is_distributed_error(e: BaseException) -> bool:
    """A failure of torch.distributed's backend (never one of our wire errors, which name their peer)."""
    import torch.distributed as dist

    from vfl.wire import WireError

    if isinstance(e, WireError):
        return False

    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None)) if k)
    text = str(e)
    return isinstance(e, kinds) or any(
        w in text
        for w in (
            "gloo",
            "Gloo",
            "NCCL",
            "Connection closed",
            "timed out",
            "Timed out",
            "Connection reset",
            "DistNetworkError",
        )
    )


def start_ranks(cfg, env: RankEnv, device, log=None) -> RankContext:
    """The party's rank context: RankContext() for one rank (no torch.distributed), else the process group."""
    if not env.distributed:
        return RankContext()
    d = cfg.distributed
    if log is not None:
        log(
            f"{cfg.party}: rank {env.rank} of {env.ranks} (local {env.local_rank} of {env.local_ranks}); "
            f"joining the party's process group ({d.backend}, timeout {d.timeout_s:g} s)"
        )
    return DistributedContext(env, cfg.party, d.backend, d.timeout_s, device)


def _no_buffer_sync() -> dict:
    """DDP's keyword that stops syncing buffers every forward (the bottom's only buffer is a constant)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    names = inspect.signature(DistributedDataParallel).parameters
    return {"forward_sync_buffers": False} if "forward_sync_buffers" in names else {"broadcast_buffers": False}
