"""Epoch plans: the order in which one worker reads the samples of an epoch.

Every sampler is a pure function of ``(seed, epoch, rank, world)`` and, for the importance
sampler, of the score table and the worker's cache contents at the epoch's start, so a plan
can be drawn again after a power failure from a restored state (docs/shade.md).
"""
from __future__ import annotations

import numpy as np

from .importance import ScoreTable

SAMPLERS = ("sequential", "shuffle", "importance")
#: how the importance sampler splits one epoch's draws over the workers (SHADE's
#: ``score_based_rep``): ``relaxed`` every worker its own W-th, ``aggressive`` every worker the
#: same most frequently drawn N/W, ``auto`` aggressive while validation improves
#: (:func:`aggressive_from_validation`)
SAMPLING_MODES = ("relaxed", "aggressive", "auto")


def aggressive_from_validation(metrics) -> bool:
    """SHADE's rule (``bench_cifar10.py`` + ``ShadeSampler.score_based_rep``) for the epoch
    after the validation results ``metrics`` (one per finished epoch, oldest first; higher is
    better): the changes are ``[0, m1 - m0, m2 - m1, ...]`` (the first epoch's change counts
    as 0); their score is the sum of the last three divided by 3 once there are three, else
    the last change; sampling is aggressive iff the score is > 0. Before any validation
    SHADE's score is 100 (aggressive); epoch 0 is a shuffle whatever the mode, so that case
    only arises without a validation set, which the data path refuses."""
    m = [float(x) for x in metrics]
    if not m:
        return True
    diffs = [0.0] + [b - a for a, b in zip(m, m[1:])]
    score = sum(diffs[-3:]) / 3 if len(diffs) >= 3 else diffs[-1]
    return score > 0


def _rng(seed: int, epoch: int, rank: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(purpose, epoch, rank)))


def epoch_plan(kind: str, n: int, epoch: int, *, seed: int = 0, rank: int = 0, world: int = 1,
               scores: ScoreTable | None = None, cached=frozenset(),
               rep_factor: float = 1.0, aggressive: bool = False) -> np.ndarray:
    """Sample ids worker ``rank`` of ``world`` reads in ``epoch`` (0-based), ``n // world``
    of them.

    - ``sequential``: file order, worker r takes ids r, r + world, ...
    - ``shuffle``: one permutation of the dataset per epoch (the same on every worker,
      ``seed``), worker r takes every world-th id from position r (PyTorch's
      DistributedSampler).
    - ``importance`` (SHADE): epoch 0 as ``shuffle``; later epochs draw ``n`` ids with
      replacement with probabilities ``scores.probabilities()`` (one draw shared by every
      worker), worker r takes every world-th (*relaxed*) or, with ``aggressive``, every
      worker takes the same ``n // world`` first draws after sorting them by how often they
      were drawn (most first, ties by id; repeats kept: SHADE's ``pads_sort``), shuffled per
      worker; then the worker's ids that are in ``cached``
      come first, repeated ``rep_factor`` times (1, 1.5, 2, ...), followed by its misses to
      fill the list to ``n // world`` (SHADE's hit-aware ordering; with ``rep_factor`` > 1,
      misses are dropped in favour of cached samples).
    """
    if kind not in SAMPLERS:
        raise ValueError(f"unknown sampler {kind!r} (one of {SAMPLERS})")
    if not (0 <= rank < world):
        raise ValueError(f"rank {rank} outside 0..{world - 1}")
    per = n // world
    if kind == "sequential":
        return np.arange(n, dtype=np.int64)[rank::world][:per]
    if kind == "shuffle" or epoch == 0:
        return _rng(seed, epoch, 0, 1).permutation(n)[rank::world][:per].astype(np.int64)
    if scores is None:
        raise ValueError("the importance sampler needs a score table")
    if rep_factor < 1 or (2 * rep_factor) % 1:
        raise ValueError(f"rep_factor must be 1, 1.5, 2, ... not {rep_factor!r}")
    draws = _rng(seed, epoch, 0, 2).choice(n, size=n, replace=True, p=scores.probabilities())
    if aggressive:
        count = np.bincount(draws, minlength=n)
        by_freq = draws[np.lexsort((draws, -count[draws]))]
        mine = _rng(seed, epoch, rank, 4).permutation(by_freq[:per])
    else:
        mine = draws[rank::world][:per]
    hit = np.fromiter((int(i) in cached for i in mine), dtype=bool, count=mine.size)
    hits, misses = mine[hit], mine[~hit]
    whole = int(rep_factor)
    rep = np.concatenate([hits] * whole + ([hits[:hits.size // 2]] if rep_factor % 1 else []))
    rng = _rng(seed, epoch, rank, 3)
    rep = rng.permutation(rep)[:per]
    misses = rng.permutation(misses)[:per - rep.size]
    return np.concatenate([rep, misses]).astype(np.int64)
