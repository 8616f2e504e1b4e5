"""Samples of every typed wire message with the meta protocol 3 sent for each, and the frames a receiver decodes."""

from __future__ import annotations

import dataclasses

import numpy as np

from vfl.wire.frames import Message, decode, encode
from vfl.wire.link_messages import LinkEcho, LinkProbe, LinkReport
from vfl.wire.messages import (
    Abort,
    Bye,
    Done,
    Embedding,
    Eval,
    Forward,
    Gradient,
    Hello,
    Prior,
    Psi,
    Restore,
    Save,
    Snapshot,
    Wait,
    Welcome,
    WireMessage,
)
from vfl.wire.predict_messages import PredictCut, PredictDone, PredictHello, PredictRows, PredictWelcome
from vfl.wire.resync_messages import Rejoin, Resync
from vfl.wire.serve_messages import ServeCut, ServeHello, ServeIds, ServeRefused, ServeWelcome

SUITE = "ecdh-psi/x25519-elligator2x2-sha512/v1"
NONCE = "0123456789abcdef0123456789abcdef"
DIGESTS = {"train": "a" * 64, "valid": "b" * 64, "test": "c" * 64}
ROWS = {"train": 800, "valid": 100, "test": 100}
CUT = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
POINTS = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
HELLO = Hello(
    nonce=NONCE,
    party="follower0",
    protocol=3,
    id_digest=DIGESTS,
    rows=ROWS,
    batch_size=64,
    seed=2**63 - 1,
    cut_dim=8,
    microbatches=2,
    resume_step=10,
    timeout_s=60.0,
)

# (message, the meta the code before the typed classes sent for it: same keys, values and order)
HELLO_META = {
    "nonce": NONCE,
    "party": "follower0",
    "protocol": 3,
    "id_digest": DIGESTS,
    "rows": ROWS,
    "batch_size": 64,
    "seed": 2**63 - 1,
    "cut_dim": 8,
    "microbatches": 2,
    "resume_step": 10,
    "timeout_s": 60.0,
}

SAMPLES: list[tuple[WireMessage, dict]] = [
    (Psi.hello(SUITE, 100), {"op": "hello", "suite": SUITE, "n": 100}),
    (Psi.chunk("mask", 0, 3), {"op": "mask", "start": 0, "stop": 3}),
    (Psi.chunk("mask", 0, 3, POINTS), {"op": "mask", "start": 0, "stop": 3}),
    (Psi.chunk("double", 5, 8, POINTS), {"op": "double", "start": 5, "stop": 8}),
    (Psi.chunk("leader", 0, 3, POINTS), {"op": "leader", "start": 0, "stop": 3}),
    (Psi.result(2, 4, 9, np.array([3, 17], np.int64)), {"op": "result", "start": 2, "stop": 4, "total": 9}),
    (Psi.done(9), {"op": "done", "size": 9}),
    (
        HELLO,
        HELLO_META,
    ),
    (
        dataclasses.replace(HELLO, rank=1, ranks=2),
        {**HELLO_META, "rank": 1, "ranks": 2},
    ),
    (
        Welcome(run="f" * 32, nonce=NONCE, epochs=3, steps_per_epoch=13, sends_train=3, sends_valid=3, sends_test=4),
        {
            "run": "f" * 32,
            "nonce": NONCE,
            "epochs": 3,
            "steps_per_epoch": 13,
            "sends_train": 3,
            "sends_valid": 3,
            "sends_test": 4,
        },
    ),
    (
        Welcome(run="f" * 32, nonce=NONCE, epochs=3, steps_per_epoch=13, rank=0, ranks=2),
        {
            "run": "f" * 32,
            "nonce": NONCE,
            "epochs": 3,
            "steps_per_epoch": 13,
            "sends_train": 0,
            "sends_valid": 0,
            "sends_test": 0,
            "rank": 0,
            "ranks": 2,
        },
    ),
    (Forward(epoch=1, step=7, rows=4, digest="d" * 32), {"epoch": 1, "step": 7, "rows": 4, "digest": "d" * 32}),
    (
        Forward(epoch=0, step=2, rows=4, digest="d" * 32, phase="prior"),
        {"phase": "prior", "epoch": 0, "step": 2, "rows": 4, "digest": "d" * 32},
    ),
    (Embedding(cut=CUT, epoch=1, step=7, micro=1), {"epoch": 1, "step": 7, "micro": 1}),
    (Embedding(cut=CUT, epoch=0, step=2), {"epoch": 0, "step": 2}),
    (Embedding(cut=CUT, eval=("valid", 96, 100)), {"eval": ["valid", 96, 100]}),
    (Gradient(grad=CUT, epoch=1, step=7, micro=0), {"epoch": 1, "step": 7, "micro": 0}),
    (Gradient(grad=CUT, epoch=0, step=2, phase="prior"), {"phase": "prior", "epoch": 0, "step": 2}),
    (
        Eval(split="test", start=0, stop=4, digest="e" * 32),
        {"split": "test", "start": 0, "stop": 4, "digest": "e" * 32},
    ),
    (
        Eval(split="train", start=4, stop=8, digest="0a" * 16, phase="prior"),
        {"phase": "prior", "split": "train", "start": 4, "stop": 8, "digest": "0a" * 16},
    ),
    (Save(tag="step100", epoch=1, step=100), {"tag": "step100", "epoch": 1, "step": 100}),
    (Snapshot(step=40), {"step": 40}),
    (Restore(step=40), {"step": 40}),
    (Wait(), {}),
    (Done(epoch=2, step=39), {"epoch": 2, "step": 39}),
    (Done(epoch=-1, step=0), {"epoch": -1, "step": 0}),
    (Bye(steps=39, snapshot_bytes=123456), {"steps": 39, "snapshot_bytes": 123456}),
    (Abort(reason="training loss became nan"), {"reason": "training loss became nan"}),
    (Prior(indices=np.array([0, 3, 4, 9], np.int64), epochs=2), {"rows": 4, "epochs": 2}),
    (
        PredictHello(NONCE, "follower0", 5, "r" * 32, 40, "f" * 32, 2, 3000, 60.0),
        {
            "nonce": NONCE,
            "party": "follower0",
            "protocol": 5,
            "run": "r" * 32,
            "step": 40,
            "fingerprint": "f" * 32,
            "cut_dim": 2,
            "rows": 3000,
            "timeout_s": 60.0,
        },
    ),
    (PredictWelcome("r" * 32, NONCE, 4096), {"run": "r" * 32, "nonce": NONCE, "batch_rows": 4096}),
    (PredictRows(0, 4096, "d" * 32), {"start": 0, "stop": 4096, "digest": "d" * 32}),
    (PredictCut(CUT, 0, 3), {"start": 0, "stop": 3}),
    (PredictDone(3000), {"rows": 3000}),
    (
        ServeHello("a" * 32, "follower0", 5, "r" * 32, 1600, "f" * 32, 2, 60.0, 1024, 1e5),
        {
            "nonce": "a" * 32,
            "party": "follower0",
            "protocol": 5,
            "run": "r" * 32,
            "step": 1600,
            "fingerprint": "f" * 32,
            "cut_dim": 2,
            "timeout_s": 60.0,
            "max_rows": 1024,
            "rows_per_s": 1e5,
        },
    ),
    (ServeWelcome("r" * 32, "a" * 32), {"run": "r" * 32, "nonce": "a" * 32}),
    (ServeIds(7, np.array([3, -1, 9], np.int64), 250), {"request": 7, "rows": 3, "deadline_ms": 250}),
    (ServeCut(7, CUT, np.array([1], np.int64)), {"request": 7}),
    (ServeRefused(7, "rate limit", 40), {"request": 7, "reason": "rate limit", "retry_ms": 40}),
    (LinkProbe(3, NONCE, 1024, np.zeros(7, np.uint8)), {"probe": 3, "nonce": NONCE, "echo_bytes": 1024}),
    (LinkEcho(3, NONCE, np.zeros(1024, np.uint8)), {"probe": 3, "nonce": NONCE}),
    (LinkReport(40.0, 1, 100.0), {"rtt_ms": 40.0, "final": 1, "down_mbit": 100.0}),
    (Resync("hello", "0" * 32), {"op": "hello", "nonce": "0" * 32}),
    (
        Resync("state", "1" * 32, "0" * 32, 41, 7),
        {"op": "state", "nonce": "1" * 32, "echo": "0" * 32, "received": 41, "step": 7},
    ),
    (Rejoin(120), {"step": 120}),
]
SENDER = {
    "HELLO": "follower0",
    "EMBEDDING": "follower0",
    "BYE": "follower0",
    "PREDICT_HELLO": "follower0",
    "PREDICT_CUT": "follower0",
    "SERVE_HELLO": "follower0",
    "SERVE_CUT": "follower0",
    "SERVE_REFUSED": "follower0",
}  # the others: as the leader sends them


def _wire(message: WireMessage, meta: dict | None = None, tensors: list | None = None) -> Message:
    """The message as a receiver decodes it from the frames (meta / tensors: replaced, to plant a fault)."""
    m, t = message.to_wire()
    sender = SENDER.get(message.TYPE, "leader")
    frames = encode(message.TYPE, sender, "run1", 5, m if meta is None else meta, t if tensors is None else tensors)
    return decode([bytes(memoryview(f)) for f in frames], sender)
