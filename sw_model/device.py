"""Golden model of the LOOKUP command (gather + sum-pool), implementing docs/lookup.md exactly."""
from dataclasses import dataclass, fields

import numpy as np

from hw.config import DeviceConfig, ELEMS_PER_LINE, LINE_BYTES, SUPPORTED_DIMS
from hw.encodings import LOOKUP_CMD_FIELDS, LookupErrorCode, widths
from .fixedpoint import saturate32
from .memory import MemoryImage

_POOL_CHUNK_ELEMS = 1 << 21   # gathered elements per pooling chunk (bounds temporary memory)


@dataclass(frozen=True)
class LookupCmd:
    """LOOKUP command; field names and order are ``hw.encodings.LOOKUP_CMD_FIELDS``."""
    tag: int
    dim: int
    table_rows: int
    n_bags: int
    table_base: int
    offsets_addr: int
    indices_addr: int
    out_addr: int


@dataclass(frozen=True)
class LookupCompletion:
    """LOOKUP completion; field names and order are ``hw.encodings.LOOKUP_CPL_FIELDS``."""
    tag: int
    err_code: int
    err_bag: int = 0
    err_value: int = 0
    rows: int = 0
    sat: int = 0
    out_lines: int = 0
    cycles: int = 0

    @property
    def ok(self) -> bool:
        return self.err_code == LookupErrorCode.OK

    def mismatches(self, other: "LookupCompletion") -> list[str]:
        """Fields (except ``cycles``) that differ, as ``"name: self != other"`` strings."""
        return [f"{f.name}: {getattr(self, f.name)} != {getattr(other, f.name)}"
                for f in fields(self)
                if f.name != "cycles" and getattr(self, f.name) != getattr(other, f.name)]


def _check_widths(obj, field_list, addr_bits: int):
    for name, w in widths(field_list, addr_bits):
        v = getattr(obj, name)
        if not (isinstance(v, (int, np.integer)) and 0 <= v < (1 << w)):
            raise ValueError(f"{type(obj).__name__}.{name}={v!r} does not fit in {w} unsigned bits")


class DeviceModel:
    """Golden device: executes commands against a ``MemoryImage`` (no media faults, ``cycles`` = 0)."""

    def __init__(self, cfg: DeviceConfig, mem: MemoryImage):
        self.cfg = cfg
        self.mem = mem

    def lookup(self, cmd: LookupCmd) -> LookupCompletion:
        """Run one LOOKUP per docs/lookup.md: checks in documented order, outputs of the bags before
        the first failing one written to ``mem``, completion counters for those bags.

        Raises ValueError if a command field does not fit its encoded width (a caller bug, not a
        device error).
        """
        cfg, mem = self.cfg, self.mem
        _check_widths(cmd, LOOKUP_CMD_FIELDS, cfg.addr_bits)
        tag, dim, n = int(cmd.tag), int(cmd.dim), int(cmd.n_bags)
        tbase, oaddr, iaddr, out = (int(cmd.table_base), int(cmd.offsets_addr),
                                    int(cmd.indices_addr), int(cmd.out_addr))
        table_rows = int(cmd.table_rows)

        def cpl(code, value=0, bag=0, rows=0, sat=0, out_lines=0):
            return LookupCompletion(tag=tag, err_code=LookupErrorCode(code), err_bag=int(bag),
                                    err_value=int(value), rows=int(rows), sat=int(sat),
                                    out_lines=int(out_lines))

        # 1-3: command-level checks; nothing is read or written on failure.
        if dim not in SUPPORTED_DIMS:
            return cpl(LookupErrorCode.BAD_DIM, dim)
        for addr, align in ((tbase, LINE_BYTES), (out, LINE_BYTES), (oaddr, 4), (iaddr, 4)):
            if addr % align:
                return cpl(LookupErrorCode.ALIGN, addr)
        row_bytes = dim * 4
        t0, t1 = cfg.table_base, cfg.table_base + cfg.table_size
        s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
        for base, length, r0, r1 in ((tbase, table_rows * row_bytes, t0, t1),
                                     (oaddr, 4 * (n + 1), s0, s1),
                                     (out, n * row_bytes, s0, s1)):
            if not (r0 <= base and base + length <= r1):
                return cpl(LookupErrorCode.ADDR_RANGE, base)
        if not (s0 <= iaddr <= s1):
            return cpl(LookupErrorCode.ADDR_RANGE, iaddr)

        # 4-6: per-bag offset checks, vectorized (int64 is exact: addresses < 2^52, 4*e < 2^34).
        off = mem.read_u32(oaddr, n + 1).astype(np.int64)
        s, e = off[:-1], off[1:]
        bad = (e < s) | (e - s > cfg.max_bag) | (iaddr + 4 * e > s1)
        k = int(np.argmax(bad)) if bad.any() else n        # first bag failing checks 4-6
        # Bags 0..k-1 have ordered offsets, so their indices are the span [off[0], off[k]).
        idx = mem.read_u32(iaddr + 4 * int(off[0]), int(off[k] - off[0])).astype(np.int64)

        # 7: first out-of-range index; its bag precedes bag k, so it is reported first.
        bad_idx = np.flatnonzero(idx >= table_rows)
        if bad_idx.size:
            p = int(bad_idx[0])
            w = int(np.searchsorted(e[:k], off[0] + p, side="right"))
            err = (LookupErrorCode.INDEX_RANGE, int(idx[p]))
        elif k < n:
            w = k
            if e[k] < s[k]:
                err = (LookupErrorCode.OFFSETS_ORDER, int(e[k]))
            elif e[k] - s[k] > cfg.max_bag:
                err = (LookupErrorCode.BAG_TOO_LONG, int(e[k] - s[k]))
            else:
                err = (LookupErrorCode.ADDR_RANGE, iaddr + 4 * int(e[k]))
        else:
            w, err = n, (LookupErrorCode.OK, 0)

        # Pool and write bags 0..w-1.
        n_rows = int(off[w] - off[0])
        sat = 0
        if w:
            sums = self._pool(tbase, dim, idx[:n_rows], s[:w] - off[0], e[:w] - off[0])
            vals, sat = saturate32(sums)
            mem.write(out, vals.astype("<i4").tobytes())
        return cpl(err[0], err[1], bag=(w if err[0] else 0), rows=n_rows, sat=sat,
                   out_lines=w * (dim // ELEMS_PER_LINE))

    def _pool(self, tbase: int, dim: int, idx, s, e) -> np.ndarray:
        """Exact int64 sums, shape (len(s), dim), of table rows ``idx[s[b]:e[b]]`` (contiguous bags)."""
        uniq, inv = np.unique(idx, return_inverse=True)
        lpr = dim // ELEMS_PER_LINE
        line_addrs = (tbase + uniq[:, None] * (dim * 4) + np.arange(lpr) * LINE_BYTES).ravel()
        tab = np.frombuffer(self.mem.gather_lines(line_addrs), dtype="<i4")
        tab = tab.reshape(len(uniq), dim).astype(np.int64)
        sums = np.zeros((len(s), dim), dtype=np.int64)
        ne = np.flatnonzero(e > s)                  # empty bags stay 0
        st, en = s[ne], e[ne]
        max_rows = max(1, _POOL_CHUNK_ELEMS // dim)
        i = 0
        while i < len(ne):
            j = max(i + 1, int(np.searchsorted(en, st[i] + max_rows, side="right")))
            rows = tab[inv[st[i]:en[j - 1]]]
            sums[ne[i:j]] = np.add.reduceat(rows, st[i:j] - st[i], axis=0)
            i = j
        return sums
