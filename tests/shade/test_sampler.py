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


def test_aggressive_rule_from_validation():
    """SHADE's bench_cifar10.py: changes [0, m1 - m0, ...]; score = mean of the last three
    once there are three (sum / 3), else the last change; aggressive iff score > 0."""
    from trainingcxl.shade.sampler import aggressive_from_validation as agg
    assert agg([]) is True                                   # SHADE's initial score 100
    assert agg([0.60]) is False                              # [0] -> 0
    assert agg([0.60, 0.62]) is True                         # [0, .02] -> .02
    assert agg([0.60, 0.59]) is False                        # [0, -.01]
    assert agg([0.60, 0.62, 0.61]) is True                   # (0 + .02 - .01) / 3
    assert agg([0.60, 0.62, 0.61, 0.58]) is False            # (.02 - .01 - .03) / 3
    assert agg([0.60, 0.50, 0.51, 0.52]) is False            # (-.1 + .01 + .01) / 3
    assert agg([0.5, 0.6, 0.4, 0.45, 0.5, 0.55]) is True     # (.05 + .05 + .05) / 3


def test_aggressive_every_worker_takes_the_most_drawn():
    """Aggressive: every worker reads the same n/W most frequently drawn samples (repeats
    kept, ties by id), each in its own order; the relaxed plans of all workers together are
    the draws themselves, from which the reference is computed."""
    from collections import Counter
    n, world = 40, 4
    t = ScoreTable(n)
    t.update(np.arange(10), np.full(10, 30.0))               # samples 0-9 drawn far more often
    relaxed = [epoch_plan("importance", n, 2, seed=5, rank=r, world=world, scores=t)
               for r in range(world)]
    count = Counter(np.concatenate(relaxed).tolist())
    expect = sorted(sorted(count.elements(), key=lambda i: (-count[i], i))[:n // world])
    plans = [epoch_plan("importance", n, 2, seed=5, rank=r, world=world, scores=t,
                        aggressive=True) for r in range(world)]
    for p in plans:
        assert sorted(p.tolist()) == expect
    assert len({tuple(p.tolist()) for p in plans}) > 1, "each worker shuffles its own copy"
    # one worker: the same draws as relaxed, in another order
    one = epoch_plan("importance", n, 2, seed=5, scores=t, aggressive=True)
    assert sorted(one.tolist()) == sorted(epoch_plan("importance", n, 2, seed=5,
                                                     scores=t).tolist())
