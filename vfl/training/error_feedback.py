"""Top-k's error feedback at the leader: each training sample's unsent gradient mass, added to its next gradient.

EF-SGD (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD", Alg. 2; Stich, Cordonnier, Jaggi 2018, "Sparsified
SGD with Memory", Alg. 1) keeps, at the sender, what compression dropped and adds it to the next vector it
compresses: p_t = g_t + e_t, send C(p_t), e_{t+1} = p_t - C(p_t). The sender of a cut gradient is the leader, the
only party that holds the uncompressed gradient (a follower receives C(p_t) alone and cannot know what was dropped),
so the memory lives here. A row of a cut gradient belongs to one sample, and the next step's rows are other samples:
adding sample i's residual to sample j's gradient would push it through j's features. So the memory is per training
sample (rows x cut_dim float32, per follower), and a sample's residual joins its own next gradient (its next batch,
usually the next epoch). Sum over the run of what was sent + the memory = the sum of the true gradients, exactly up
to float rounding (tested).

Early stopping's RESTORE returns every party to the best step's weights and the leader calls reset(): the residuals
were accumulated along the discarded steps, so they are dropped, not replayed into weights that never saw them. A
resumed run starts with an empty memory too (it is not checkpointed): the first epoch after a resume sends top-k of
the bare gradients, which EF's analysis covers (any bounded memory). Nothing here reads a label: the memory is the
gradient of the training labels (randomized under label DP), so what it makes travel is post-processing of them.
"""

from __future__ import annotations

import numpy as np

from vfl.wire.codecs import Codec, densify_topk, encode


class ErrorFeedback:
    """The residual memory of one follower's top-k gradients, one row per training sample (allocated on first use)."""

    def __init__(self, samples: int, cols: int):
        self.samples, self.cols = int(samples), int(cols)
        self.memory: np.ndarray | None = None

    def send(self, codec: Codec, grad: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """The top-k payload of grad (rows x cols, for the training samples `rows`, distinct) plus each sample's
        memory; the memory keeps what this payload drops."""
        if self.memory is None:
            self.memory = np.zeros((self.samples, self.cols), np.float32)
        wanted = np.asarray(grad, np.float32) + self.memory[rows]
        payload = encode(codec, wanted)
        self.memory[rows] = wanted - densify_topk(payload[0], payload[1], self.cols)
        return payload

    def reset(self) -> None:
        """Forget every residual (RESTORE: they belong to discarded steps)."""
        self.memory = None
