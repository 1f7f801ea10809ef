"""Epoch plans: sequential and shuffle partitions over workers, importance draws with
SHADE's hit-aware ordering and replication factor."""
import numpy as np
import pytest

from trainingcxl.shade.importance import ScoreTable
from trainingcxl.shade.sampler import epoch_plan


def test_sequential_and_shuffle_partition_the_dataset():
    assert epoch_plan("sequential", 10, 3, rank=1, world=2).tolist() == [1, 3, 5, 7, 9]
    parts = [epoch_plan("shuffle", 12, 2, seed=4, rank=r, world=3) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(12))
    assert not np.array_equal(epoch_plan("shuffle", 12, 1, seed=4),
                              epoch_plan("shuffle", 12, 2, seed=4))


def test_importance_epoch0_is_a_shuffle():
    assert np.array_equal(epoch_plan("importance", 20, 0, seed=1, scores=ScoreTable(20)),
                          epoch_plan("shuffle", 20, 0, seed=1))


def test_importance_draws_follow_the_weights():
    t = ScoreTable(4, init=1e-9)
    t.update([2], [1.0])                        # nearly all the mass on sample 2
    plan = epoch_plan("importance", 4, 1, scores=t)
    assert plan.tolist() == [2, 2, 2, 2]


def test_cached_samples_come_first_and_replicate():
    n = 400
    t = ScoreTable(n)
    cached = set(range(0, n, 4))
    plan = epoch_plan("importance", n, 2, seed=3, scores=t, cached=cached)
    hit = np.array([i in cached for i in plan])
    k = int(hit.sum())
    assert 0 < k < n and hit[:k].all() and not hit[k:].any()
    plan2 = epoch_plan("importance", n, 2, seed=3, scores=t, cached=cached, rep_factor=2)
    # the same draws: every cached id twice, then misses to fill n
    assert len(plan2) == n
    assert sorted(plan2[:2 * k].tolist()) == sorted(plan[:k].tolist() * 2)
    with pytest.raises(ValueError, match="rep_factor"):
        epoch_plan("importance", n, 2, scores=t, rep_factor=1.2)
    with pytest.raises(ValueError, match="unknown sampler"):
        epoch_plan("weighted", n, 2)
