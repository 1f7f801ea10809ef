"""Per-sample importance (SHADE, FAST '23): the loss of every sample, turned into a rank score
within its minibatch so scores from different minibatches compare (docs/shade.md)."""
from __future__ import annotations

import numpy as np

#: Rank weights start at log(RANK_BASE): rank 0 (lowest loss of its minibatch) scores
#: log(10), rank j scores log(j + 10) -- SHADE's published weights.
RANK_BASE = 10


def sample_losses(logits, labels) -> np.ndarray:
    """Binary cross entropy of every sample from its logit (float64, the stable form
    ``max(z,0) - z*y + log1p(exp(-|z|))`` that the trainer's mean loss uses)."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if z.shape != y.shape:
        raise ValueError(f"logits {z.shape} and labels {y.shape} differ")
    return np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))


def rank_scores(losses) -> np.ndarray:
    """SHADE's rank-based score of each sample of one minibatch: the sample with the j-th
    smallest loss (j = 0, 1, ...; ties broken by position, a stable sort) scores
    ``log(j + 10)``. Only the order of the losses matters, so a hard sample of an easy
    minibatch and one of a hard minibatch score alike."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 1:
        raise ValueError(f"losses must be 1-D, got shape {losses.shape}")
    if not np.all(np.isfinite(losses)):
        raise ValueError("losses must be finite")
    order = np.argsort(losses, kind="stable")
    out = np.empty(losses.size)
    out[order] = np.log(np.arange(losses.size) + RANK_BASE)
    return out


class ScoreTable:
    """Importance of every sample of the dataset (SHADE's sampler weights).

    ``weights[i]``: the latest rank score of sample i (``init`` before it was ever scored);
    ``freq[i]``: how many times it was scored; ``seen[i]``. ``smoothing``: SHADE's additive
    term (``ls_param``): after the first epoch ``1e-2`` x the epoch's mean loss, then multiplied
    by ``exp((loss - prev) / prev)`` at each epoch end, so uniform draws gain weight when the
    loss rises. ``probabilities()`` = normalised ``weights + smoothing``.
    """

    def __init__(self, n: int, init: float = 1.0, smoothing_factor: float = 1e-2):
        if n < 1:
            raise ValueError(f"ScoreTable needs n >= 1, not {n!r}")
        self.weights = np.full(n, float(init))
        self.freq = np.zeros(n, dtype=np.int64)
        self.smoothing = 0.0
        self.smoothing_factor = float(smoothing_factor)
        self.prev_loss: float | None = None

    @property
    def seen(self) -> np.ndarray:
        return self.freq > 0

    def update(self, ids, scores):
        ids = np.asarray(ids, dtype=np.int64)
        self.weights[ids] = scores
        np.add.at(self.freq, ids, 1)

    def end_epoch(self, mean_loss: float):
        if self.prev_loss is None:
            self.smoothing = mean_loss * self.smoothing_factor
        else:
            self.smoothing *= float(np.exp((mean_loss - self.prev_loss) / self.prev_loss))
        self.prev_loss = float(mean_loss)

    def probabilities(self) -> np.ndarray:
        w = self.weights + self.smoothing
        return w / w.sum()
