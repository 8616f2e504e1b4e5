"""A whole training run in memory: the leader's and one follower's trainers on the in-memory channel pair.

The follower runs in a thread, as its process would; for tests that need a run's outcome without processes."""

from __future__ import annotations

import threading

import numpy as np
import torch
import yaml

from tests.support.memory_channels import TIMEOUT_S, MemoryFollowerChannel, MemoryLeaderChannel, _Queues
from tests.support.party_processes import party_configs
from vfl.wire import PeerAbort
from vfl.wire.messages import Abort


def memory_run(tmp_path, shards, before_train=None, edit_config=None, **config) -> dict:
    """Train one run of leader + follower0 (party_configs(**config)) in memory to its end; returns the trainers, the
    parties, every posted message and the YAMLs: {"leader", "follower", "parties", "posted", "configs"}.
    before_train(leader): called after the leader's prepare(). edit_config(party, doc): changes a party's YAML
    document before it is loaded. Each party's model is resolved as training resolves it (the table recipe's, or a
    resumed checkpoint's: vfl/training/trained_model.py)."""
    from follower.trainer import FollowerTrainer
    from leader.trainer import LeaderTrainer
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.obs.metrics import RunLog
    from vfl.training.party import BottomParty
    from vfl.training.table_defaults import shard_rows
    from vfl.training.trained_model import training_model

    paths = party_configs(str(tmp_path), str(shards), **config)
    if edit_config is not None:
        for name, path in paths.items():
            with open(path) as f:
                doc = yaml.safe_load(f)
            edit_config(name, doc)
            with open(path, "w") as f:
                yaml.safe_dump(doc, f)
    cfgs = {name: load_config(path) for name, path in paths.items()}
    loaded = {n: PartyShard(c.data.path) for n, c in cfgs.items()}
    resolved = {n: training_model(c, shard_rows(loaded[n].manifest)) for n, c in cfgs.items()}
    cfgs = {n: cfg for n, (cfg, _) in resolved.items()}
    common = np.intersect1d(*[s.all_ids() for s in loaded.values()])
    for s in loaded.values():
        s.restrict(common)
    parties = {n: BottomParty(cfgs[n], loaded[n], torch.device("cpu"), resolved[n][1]) for n in cfgs}
    queues = _Queues(("follower0",))
    leader_ch, follower_ch = MemoryLeaderChannel("leader", queues), MemoryFollowerChannel("follower0", queues)
    out = str(tmp_path / "out")
    leader = LeaderTrainer(
        cfgs["leader"], leader_ch, parties["leader"], RunLog(str(tmp_path / "leader.log"), "leader"), out
    )
    follower = FollowerTrainer(
        cfgs["follower0"], follower_ch, parties["follower0"], RunLog(str(tmp_path / "follower0.log"), "follower0"), out
    )
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            follower.handshake()
            follower.run()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors.append(e)
            if not isinstance(e, PeerAbort):
                follower_ch.post(Abort(f"follower0: {e}"))

    thread = threading.Thread(target=follow, name="follower0", daemon=True)
    thread.start()
    try:
        leader.handshake()
        leader.prepare()
        if before_train is not None:
            before_train(leader)
        leader.train()
        leader.finish(leader.cfg.train.epochs - 1, leader.loop.global_step)
    except BaseException as e:
        leader_ch.abort_all(f"test failed: {e}")
        raise
    finally:
        thread.join(TIMEOUT_S + 5)
    assert not thread.is_alive(), "the follower thread did not end"
    if errors:
        raise errors[0]
    return {"leader": leader, "follower": follower, "parties": parties, "posted": queues.posted, "configs": paths}
