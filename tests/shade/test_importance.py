"""Per-sample loss, SHADE's rank-based score and the score table, against hand-computed
values."""
import math

import numpy as np
import pytest

from trainingcxl.shade.importance import ScoreTable, rank_scores, sample_losses


def test_sample_losses_match_the_formula():
    z = np.array([0.0, 2.0, -3.0, 40.0])
    y = np.array([1.0, 0.0, 1.0, 1.0])
    want = [math.log(2), math.log1p(math.exp(2)), math.log1p(math.exp(3)), math.log1p(
        math.exp(-40))]
    assert sample_losses(z, y) == pytest.approx(want, rel=1e-12)


def test_rank_scores_hand_computed():
    # losses 0.9, 0.1, 0.5, 0.1 -> ascending order: idx1 (0.1), idx3 (0.1, later), idx2, idx0
    got = rank_scores([0.9, 0.1, 0.5, 0.1])
    assert got == pytest.approx([math.log(13), math.log(10), math.log(12), math.log(11)])


def test_rank_scores_depend_only_on_the_order():
    easy = rank_scores([0.01, 0.02, 0.03])
    hard = rank_scores([5.0, 7.0, 9.0])
    assert np.array_equal(easy, hard)       # comparable across minibatches


def test_rank_scores_reject_bad_losses():
    with pytest.raises(ValueError, match="finite"):
        rank_scores([0.1, float("nan")])
    with pytest.raises(ValueError, match="1-D"):
        rank_scores([[0.1]])


def test_score_table_smoothing_and_probabilities():
    t = ScoreTable(4)
    t.update([0, 2], [math.log(10), math.log(11)])
    assert list(t.freq) == [1, 0, 1, 0] and list(t.seen) == [True, False, True, False]
    t.end_epoch(0.5)
    assert t.smoothing == pytest.approx(0.005)
    t.end_epoch(0.4)                           # loss fell by 20 %: exp(-0.2)
    assert t.smoothing == pytest.approx(0.005 * math.exp(-0.2))
    w = np.array([math.log(10), 1, math.log(11), 1]) + t.smoothing
    assert t.probabilities() == pytest.approx(w / w.sum())
