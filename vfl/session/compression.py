"""Each party's side of network.compression: the agreed codecs, the sender's own generator, top-k's error feedback.

The follower codes its cuts (training and EVAL alike) with the embedding codec and decodes the leader's gradients;
the leader decodes the cuts (LeaderSession.embedding_codec) and codes each follower's gradient. Stochastic rounding
(int8) draws from the sender's own generator, seeded from OS entropy: a follower's from its own, the leader's from
neither anything a follower knows (train.seed, ids, this code) nor the labels. It protects no label and needs no key;
it must only not be a function of the true labels, and it is not. Batch prediction and serving send float32 cuts.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vfl.training.error_feedback import ErrorFeedback
from vfl.wire.codecs import codecs_of, decode, encode
from vfl.wire.messages import Gradient


def _fields(codec, payload: tuple, tensor: str) -> dict:
    return {tensor: payload[0], "aux": payload[1] if len(payload) > 1 else None, "codec": codec.wire_name}


class FollowerCodecs:
    """A follower's codecs: it codes its cuts and decodes its gradients."""

    def __init__(self, compression):
        self.embedding, self.gradient = codecs_of(compression)
        self.rng = np.random.default_rng()  # this follower's own entropy (OS), never train.seed

    def embedding_fields(self, cut: np.ndarray) -> dict:
        """EMBEDDING's cut, aux and codec for a float32 (rows, cut_dim) cut."""
        return _fields(self.embedding, encode(self.embedding, cut, self.rng), "cut")

    def decoded(self, msg: Gradient, shape: tuple[int, int], where: str) -> Gradient:
        """The GRADIENT with its payload decoded to float32 `shape` (WireError: malformed, or not the agreed codec)."""
        if msg.codec is None and self.gradient.is_none:
            return msg
        grad = decode(self.gradient, msg.codec, (msg.grad, msg.aux), shape, where)
        return dataclasses.replace(msg, grad=grad, codec=None, aux=None)


class LeaderCodecs:
    """The leader's gradient coding: OS-entropy rounding and, for top-k, one residual memory per (phase, follower)."""

    def __init__(self, compression, samples: int):
        self.embedding, self.gradient = codecs_of(compression)
        self.samples = samples
        self.rng = np.random.default_rng()  # OS entropy: no seed a follower knows, no label
        self.memory: dict[tuple[str | None, str], ErrorFeedback] = {}

    def gradient_fields(self, peer: str, grad: np.ndarray, rows: np.ndarray, phase: str | None = None) -> dict:
        """GRADIENT's grad, aux and codec for a float32 (rows, cut_dim) gradient of the training samples `rows`."""
        if self.gradient.name != "topk":
            return _fields(self.gradient, encode(self.gradient, grad, self.rng), "grad")
        if phase is None:  # LP-2ST's stage one is over: its bottoms and their residuals are gone
            for key in [k for k in self.memory if k[0] is not None]:
                del self.memory[key]
        ef = self.memory.setdefault((phase, peer), ErrorFeedback(self.samples, grad.shape[1]))
        return _fields(self.gradient, ef.send(self.gradient, grad, rows), "grad")

    def reset(self) -> None:
        """RESTORE: drop every residual (vfl/training/error_feedback.py)."""
        for ef in self.memory.values():
            ef.reset()
