"""Fixed-point format: half-even rounding, counted saturation, exact integer rounding helpers."""
from fractions import Fraction

import numpy as np
import pytest

from sw_model.fixedpoint import (I32_MAX, I32_MIN, mul_round, pool_exact, round_half_even_shift,
                                 saturate32, to_fixed, to_float)

ULP = 2.0 ** -24


@pytest.mark.parametrize("ulps, expect", [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2),
                                          (-2.5, -2), (0.75, 1), (-0.75, -1), (3.5, 4)])
def test_to_fixed_rounds_ties_to_even(ulps, expect):
    q, n = to_fixed(ulps * ULP)
    assert int(q) == expect and n == 0 and q.dtype == np.int32


def test_to_fixed_saturates_both_rails_and_counts():
    x = np.array([128.0, I32_MAX * ULP, -128.0, -128.0 - ULP, np.inf, -np.inf, 1e30, 0.0])
    q, n = to_fixed(x)
    assert q.tolist() == [I32_MAX, I32_MAX, I32_MIN, I32_MIN, I32_MAX, I32_MIN, I32_MAX, 0]
    assert n == 5  # 128.0, -128-ulp, +inf, -inf, 1e30 (-128.0 and MAX*ULP are representable)


def test_to_fixed_nan_is_an_error():
    with pytest.raises(ValueError):
        to_fixed(np.array([0.0, np.nan]))


def test_to_fixed_float32_matches_fraction_reference():
    """Every float32 input converts to round_half_even(x * 2^f) exactly, for several f."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(2000) * 10).astype(np.float32)
    x[:100] = (rng.integers(-2**20, 2**20, 100) + 0.5).astype(np.float32) * np.float32(2.0 ** -12)
    for f in (0, 12, 24, 30):
        q, _ = to_fixed(x, f)
        ref = [max(I32_MIN, min(I32_MAX, round(Fraction(float(v)) * 2 ** f))) for v in x]
        assert q.tolist() == ref


def test_to_float_is_exact_inverse_of_to_fixed():
    q = np.random.default_rng(2).integers(I32_MIN, I32_MAX, 1000, endpoint=True).astype(np.int32)
    back, n = to_fixed(to_float(q, 20), 20)
    assert n == 0 and np.array_equal(back, q)


def test_saturate32_clamps_and_counts_lanes():
    acc = np.array([2**31, 2**31 - 1, -2**31, -2**31 - 1, 5 * 2**40, -(2**62), 0], dtype=np.int64)
    out, n = saturate32(acc)
    assert out.dtype == np.int32 and n == 4
    assert out.tolist() == [I32_MAX, I32_MAX, I32_MIN, I32_MIN, I32_MAX, I32_MIN, 0]


def test_pool_exact_equals_python_int_sums_including_empty():
    rows = np.full((300, 3), I32_MAX, dtype=np.int32)
    rows[:, 1] = I32_MIN
    rows[:, 2] = np.random.default_rng(3).integers(I32_MIN, I32_MAX, 300)
    assert pool_exact(rows).tolist() == [sum(int(v) for v in rows[:, j]) for j in range(3)]
    assert pool_exact(np.zeros((0, 4), np.int32)).tolist() == [0, 0, 0, 0]


def test_round_half_even_shift_matches_fraction_reference():
    """Random int64 (both signs, exact ties, extremes) / 2^s rounds exactly like Fraction round()."""
    rng = np.random.default_rng(4)
    for s in list(range(0, 9)) + [16, 24, 31, 32, 40, 62]:
        x = rng.integers(-2**63, 2**63 - 1, 300, endpoint=True, dtype=np.int64)
        lim = 2 ** min(20, 63 - s)  # k * 2^(s-1) is an exact tie for odd k, and fits in int64
        ties = [int(k) * 2 ** (s - 1) for k in rng.integers(-lim, lim, 100)] if s else []
        x = np.array(x.tolist() + ties + [0, 1, -1, 2**63 - 1, -2**63], dtype=np.int64)
        got = round_half_even_shift(x, s)
        assert got.tolist() == [round(Fraction(int(v), 2 ** s)) for v in x]


def test_round_half_even_shift_rejects_bad_shift():
    with pytest.raises(ValueError):
        round_half_even_shift(np.array([1]), 63)


def test_mul_round_matches_fraction_reference():
    """lr (u32) * grad (i32) / 2^fb rounded half-even, exact at the u32/i32 extremes too."""
    rng = np.random.default_rng(5)
    g = np.concatenate([rng.integers(I32_MIN, I32_MAX, 200, endpoint=True), [I32_MIN, I32_MAX, 0, 1, -1, 3, -3]])
    g = g.astype(np.int32)
    for lr in [0, 1, 3, 2**24, 2**31 - 1, 2**31, 2**32 - 1, int(rng.integers(0, 2**32))]:
        for fb in (0, 1, 2, 24, 31, 32):
            got = mul_round(lr, g, fb)
            assert got.tolist() == [round(Fraction(lr * int(v), 2 ** fb)) for v in g]


def test_mul_round_rejects_non_u32_lr():
    with pytest.raises(ValueError):
        mul_round(2**32, np.array([1], np.int32), 24)
    with pytest.raises(ValueError):
        mul_round(-1, np.array([1], np.int32), 24)
