"""Signed 32-bit fixed point Q(31-f).f (f = ``frac_bits``, 24 by default) and exact integer helpers.

All rounding is round-half-to-even; all saturation is to [-2^31, 2^31-1] and is counted.
"""
import numpy as np

I32_MIN = -(1 << 31)
I32_MAX = (1 << 31) - 1


def to_fixed(x, frac_bits: int = 24):
    """float -> fixed: ``rint(x * 2^f)`` (half to even), saturated to int32.

    Returns ``(int32 array, n_saturated)``; the array is 0-d for a scalar input. The scaling is
    done in float64 (exact for float32 inputs; for float64 it is exact barring over/underflow).
    NaN raises ValueError; +-inf saturates.
    """
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("to_fixed: NaN input")
    y = np.rint(x * float(1 << frac_bits))
    n_sat = int(np.count_nonzero(y > I32_MAX) + np.count_nonzero(y < I32_MIN))
    return np.clip(y, I32_MIN, I32_MAX).astype(np.int32), n_sat


def to_float(q, frac_bits: int = 24) -> np.ndarray:
    """fixed -> float64 (exact): ``q / 2^f``."""
    return np.asarray(q, dtype=np.float64) / float(1 << frac_bits)


def saturate32(acc):
    """Clamp int64 values to int32. Returns ``(int32 array, number of clamped lanes)``."""
    acc = np.asarray(acc, dtype=np.int64)
    out = np.clip(acc, I32_MIN, I32_MAX)
    return out.astype(np.int32), int(np.count_nonzero(out != acc))


def pool_exact(rows) -> np.ndarray:
    """Exact column sums of int32 rows, shape (n, dim) -> int64 (dim,); exact for n <= 2^32."""
    rows = np.asarray(rows)
    if rows.ndim != 2:
        raise ValueError(f"pool_exact: expected shape (n, dim), got {rows.shape}")
    return rows.astype(np.int64).sum(axis=0, dtype=np.int64)


def round_half_even_shift(x, shift: int) -> np.ndarray:
    """Exact ``x / 2^shift`` rounded half to even, for int64 ``x`` of any sign; 0 <= shift <= 62."""
    x = np.asarray(x, dtype=np.int64)
    if not 0 <= shift <= 62:
        raise ValueError(f"round_half_even_shift: shift must be 0..62, got {shift}")
    if shift == 0:
        return x.copy()
    q = x >> shift                                   # floor division (arithmetic shift)
    r = x & np.int64((1 << shift) - 1)               # remainder in [0, 2^shift)
    half = np.int64(1 << (shift - 1))
    up = (r > half) | ((r == half) & ((q & 1) == 1))
    return q + up.astype(np.int64)


def mul_round(lr_q: int, grad_q, lr_frac_bits: int) -> np.ndarray:
    """``round_half_even(lr_q * grad_q / 2^lr_frac_bits)`` exactly, as int64 (not saturated).

    ``lr_q`` is an unsigned 32-bit integer, ``grad_q`` int32 values; the u32 x i32 product always
    fits in int64, so the computation is exact.
    """
    lr_q = int(lr_q)
    if not 0 <= lr_q < (1 << 32):
        raise ValueError(f"mul_round: lr_q must be u32, got {lr_q}")
    g = np.asarray(grad_q)
    if g.size and (g.min() < I32_MIN or g.max() > I32_MAX):
        raise ValueError("mul_round: grad_q outside int32")
    return round_half_even_shift(np.int64(lr_q) * g.astype(np.int64), lr_frac_bits)
