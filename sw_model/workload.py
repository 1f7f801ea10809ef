"""Seeded LOOKUP workloads: tables, Zipf-skewed indices, bags, and their layout in a MemoryImage.

Every random function takes a ``numpy.random.Generator``; ``random_lookup_job`` takes a seed.
"""
import functools
from dataclasses import dataclass

import numpy as np

from hw.config import DeviceConfig, LINE_BYTES
from .device import LookupCmd
from .fixedpoint import I32_MAX, I32_MIN, to_fixed
from .memory import MemoryImage


def make_table(rng: np.random.Generator, rows: int, dim: int, frac_bits: int = 24,
               scale: float = 1.0, extreme: float = 0.0) -> np.ndarray:
    """int32 table (rows, dim) of ``to_fixed(N(0, scale))`` (float32 normals; saturating silently).

    A fraction ``extreme`` of the elements is replaced by values within 2^24 of either rail
    (random sign), to provoke output saturation when pooled.
    """
    t, _ = to_fixed(rng.standard_normal((rows, dim), dtype=np.float32) * np.float32(scale), frac_bits)
    if extreme > 0:
        pick = rng.random((rows, dim)) < extreme
        m = int(pick.sum())
        near = rng.integers(0, 1 << 24, size=m, dtype=np.int64)
        t[pick] = np.where(rng.random(m) < 0.5, I32_MAX - near, I32_MIN + near).astype(np.int32)
    return t


@functools.lru_cache(maxsize=32)
def _zipf_cdf(rows: int, alpha: float) -> np.ndarray:
    """The truncated-Zipf CDF of :func:`zipf_indices` (read-only; computed once per
    ``(rows, alpha)``: a click log draws from the same tables batch after batch)."""
    cdf = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -alpha)
    cdf /= cdf[-1]
    cdf.flags.writeable = False
    return cdf


def zipf_indices(rng: np.random.Generator, n: int, rows: int, alpha: float,
                 shuffle: bool = False) -> np.ndarray:
    """``n`` u32 indices in [0, rows), P(rank k) proportional to (k+1)^-alpha (alpha=0: uniform).

    Drawn by inverting the exact truncated-Zipf CDF. Rank k maps to row k, or to a seeded random
    permutation of the rows if ``shuffle``.
    """
    if rows < 1:
        raise ValueError("zipf_indices: rows must be >= 1")
    cdf = _zipf_cdf(int(rows), float(alpha))
    idx = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), rows - 1)
    if shuffle:
        idx = rng.permutation(rows)[idx]
    return idx.astype(np.uint32)


def make_bags(rng: np.random.Generator, n_bags: int, pooling: int, rows: int, *,
              mode: str = "fixed", alpha: float = 0.0):
    """Bags of indices into a ``rows``-row table. Returns ``(offsets, indices)``, both u32.

    ``offsets`` has n_bags+1 entries with offsets[0] = 0. Bag length is ``pooling`` for
    mode="fixed", uniform in [0, 2*pooling] for mode="uniform" (so empty bags occur).
    Indices are ``zipf_indices(alpha)``.
    """
    if mode == "fixed":
        lens = np.full(n_bags, pooling, dtype=np.int64)
    elif mode == "uniform":
        lens = rng.integers(0, 2 * pooling + 1, size=n_bags, dtype=np.int64)
    else:
        raise ValueError(f"make_bags: unknown mode {mode!r}")
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.uint32)
    return offsets, zipf_indices(rng, int(offsets[-1]), rows, alpha)


class RegionFullError(RuntimeError):
    pass


class RegionAllocator:
    """Bump allocator over ``[base, base + size)``; allocations are ``align``-aligned (64 B default)."""

    def __init__(self, base: int, size: int):
        self.base, self.size, self.next = base, size, base

    def alloc(self, nbytes: int, align: int = LINE_BYTES) -> int:
        addr = -(-self.next // align) * align
        if nbytes < 0 or addr + nbytes > self.base + self.size:
            raise RegionFullError(
                f"region [{self.base:#x}, {self.base + self.size:#x}) full: cannot allocate "
                f"{nbytes:#x} B at {addr:#x} ({self.next - self.base:#x} B used)")
        self.next = addr + nbytes
        return addr


@dataclass
class LookupJob:
    """One LOOKUP laid out in memory: its command plus the host-side arrays it was built from."""
    cmd: LookupCmd
    table: np.ndarray      # int32 (table_rows, dim)
    offsets: np.ndarray    # u32 (n_bags + 1,)
    indices: np.ndarray    # u32

    @classmethod
    def layout(cls, cfg: DeviceConfig, mem: MemoryImage, table, offsets, indices, *, tag: int = 0,
               table_alloc: RegionAllocator | None = None,
               staging_alloc: RegionAllocator | None = None,
               poison: int | None = None) -> "LookupJob":
        """Write table (table region), offsets, indices (staging) into ``mem`` and reserve the output
        buffer (staging), each 64 B aligned. Pass allocators to place several jobs in one image.
        If ``poison`` is an int32, the output buffer is pre-filled with it.
        """
        table = np.asarray(table, dtype=np.int32)
        offsets, indices = np.asarray(offsets, dtype=np.uint32), np.asarray(indices, dtype=np.uint32)
        rows, dim = table.shape
        n_bags = len(offsets) - 1
        ta = table_alloc or RegionAllocator(cfg.table_base, cfg.table_size)
        sa = staging_alloc or RegionAllocator(cfg.staging_base, cfg.staging_size)
        tbase = ta.alloc(table.nbytes)
        oaddr, iaddr = sa.alloc(offsets.nbytes), sa.alloc(indices.nbytes)
        out = sa.alloc(n_bags * dim * 4)
        mem.write_i32(tbase, table.ravel())
        mem.write_u32(oaddr, offsets)
        mem.write_u32(iaddr, indices)
        if poison is not None:
            mem.write_i32(out, np.full(n_bags * dim, poison, dtype=np.int64))
        cmd = LookupCmd(tag=tag, dim=dim, table_rows=rows, n_bags=n_bags, table_base=tbase,
                        offsets_addr=oaddr, indices_addr=iaddr, out_addr=out)
        return cls(cmd, table, offsets, indices)

    def read_output(self, mem: MemoryImage) -> np.ndarray:
        """Output buffer as int32 (n_bags, dim)."""
        c = self.cmd
        return mem.read_i32(c.out_addr, c.n_bags * c.dim).reshape(c.n_bags, c.dim)


def random_lookup_job(seed: int, cfg: DeviceConfig, *, rows: int = 1000, dim: int = 64,
                      n_bags: int = 100, pooling: int = 8, mode: str = "fixed", alpha: float = 0.0,
                      scale: float = 1.0, extreme: float = 0.0, tag: int = 0,
                      poison: int | None = None):
    """Fresh ``MemoryImage`` holding one seeded random job. Returns ``(mem, job)``."""
    rng = np.random.default_rng(seed)
    table = make_table(rng, rows, dim, cfg.frac_bits, scale, extreme)
    offsets, indices = make_bags(rng, n_bags, pooling, rows, mode=mode, alpha=alpha)
    mem = MemoryImage(1 << cfg.addr_bits)
    return mem, LookupJob.layout(cfg, mem, table, offsets, indices, tag=tag, poison=poison)
