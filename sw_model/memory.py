"""Sparse byte-addressable device memory image, stored per 64 B line.

``read(address, length)`` / ``write(address, data)`` have the signatures of cocotbext-axi's
``SparseMemory`` so the two are interchangeable. Bytes never written read as ``fill``.

Besides the bytes, each line has one bit of media metadata, *poisoned* (docs/coherence.md,
"Poison"): ``set_poison`` / ``is_poisoned`` / ``poisoned_lines``. ``write`` leaves it alone;
the PMEM models decide when a write sets or clears it.
"""
from dataclasses import dataclass

import numpy as np

LINE = 64
_MASK = ~(LINE - 1)


def lines_of(address: int, length: int) -> range:
    """Addresses of the 64 B lines that bytes ``[address, address + length)`` touch."""
    return range(address - address % LINE, address + length, LINE)


def _hexline(addr: int, chunk: bytes) -> str:
    hx = " ".join(f"{b:02x}" for b in chunk)
    asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
    return f"{addr:010x}: {hx:<47}  |{asc}|"


def _int_array(arr, dtype, lo: int, hi: int, what: str) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype == dtype:
        return a
    if a.size and a.dtype.kind not in "iub":
        raise TypeError(f"{what}: integer array expected, got {a.dtype}")
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        raise ValueError(f"{what}: values outside [{lo}, {hi}]")
    return a.astype(dtype)


def line_dict(addrs, raw: bytes) -> dict:
    """``{address: bytearray(64)}`` of lines given as their addresses and their contents
    concatenated in the same order (a memory's line store, :attr:`MemoryImage._lines`)."""
    return {int(a): bytearray(raw[LINE * i:LINE * (i + 1)]) for i, a in enumerate(addrs)}


def differing_lines(a: "MemoryImage | LineSnapshot", b: "MemoryImage | LineSnapshot", *,
                    skip: tuple[int, int] | None = None, limit: int | None = None) -> list[int]:
    """Ascending addresses of the lines whose contents differ between images ``a`` and ``b``
    (an unwritten line reads as its image's fill), lines in ``skip = (lo, hi)`` left out, at
    most ``limit`` of them (None: all). Contents only: poison bits are not compared
    (:meth:`MemoryImage.diff` compares both, line by line). Works on whole arrays
    (:meth:`MemoryImage.line_arrays`), so images of millions of lines compare in seconds.
    Either side may be a :class:`LineSnapshot`."""
    aa, da = a.line_arrays()
    ab, db = b.line_arrays()
    fill_a = np.full(LINE, a.fill, dtype=np.uint8)
    fill_b = np.full(LINE, b.fill, dtype=np.uint8)

    def rows_differ(x, y):              # (n, 64) uint8 rows compared 8 bytes at a time
        return (x.view("<u8") != y.view("<u8")).any(axis=1)

    if aa.shape == ab.shape and np.array_equal(aa, ab):
        bad = [aa[rows_differ(da, db)]]
    else:
        common, ia, ib = np.intersect1d(aa, ab, assume_unique=True, return_indices=True)
        only_a = np.ones(aa.size, dtype=bool)
        only_a[ia] = False
        only_b = np.ones(ab.size, dtype=bool)
        only_b[ib] = False
        bad = [common[rows_differ(da[ia], db[ib])],
               aa[only_a][(da[only_a] != fill_b).any(axis=1)],
               ab[only_b][(db[only_b] != fill_a).any(axis=1)]]
    out = np.sort(np.concatenate(bad))
    if skip is not None:
        out = out[(out < skip[0]) | (out >= skip[1])]
    return [int(x) for x in (out if limit is None else out[:limit])]


@dataclass(frozen=True, eq=False)
class LineSnapshot:
    """A memory image's contents as arrays: ``addrs`` (int64, ascending) and ``data`` (uint8,
    ``(n, 64)``) of its written lines, ``poisoned`` line addresses, ``size`` and ``fill``.
    Picklable in one piece (numpy buffers, no per-line objects), so a whole image travels to
    another process cheaply; :func:`differing_lines` compares it like an image and
    :meth:`to_image` makes a :class:`MemoryImage` of it again."""
    size: int
    fill: int
    addrs: np.ndarray
    data: np.ndarray
    poisoned: tuple = ()

    @classmethod
    def of(cls, mem) -> "LineSnapshot":
        """The snapshot of ``mem`` (anything with ``line_arrays``, ``size``, ``fill`` and
        ``poisoned``: a :class:`MemoryImage` or one of the PMEM models' memories)."""
        addrs, data = mem.line_arrays()
        return cls(int(mem.size), int(mem.fill), addrs, data, tuple(sorted(mem.poisoned)))

    def line_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.addrs, self.data

    def read_line(self, addr: int) -> bytes:
        """The 64 bytes of the line at ``addr`` (fill if unwritten)."""
        i = int(np.searchsorted(self.addrs, addr))
        if i < self.addrs.size and self.addrs[i] == addr:
            return self.data[i].tobytes()
        return bytes([self.fill]) * LINE

    def to_image(self) -> "MemoryImage":
        m = MemoryImage(self.size, self.fill)
        m._lines = line_dict(self.addrs.tolist(), self.data.tobytes())
        m.poisoned = set(self.poisoned)
        return m


class MemoryImage:
    """Sparse memory of ``size`` bytes (addresses ``[0, size)``), unwritten bytes read as ``fill``.

    A line counts as written (``lines()``) once any byte of it has been written. ``poisoned`` is
    the set of line addresses whose poison bit is set (any line, written or not); it is part of
    the image (``copy``, ``diff``, ``==``).
    """

    def __init__(self, size: int = 1 << 52, fill: int = 0):
        if not 0 <= fill <= 255:
            raise ValueError(f"fill must be a byte value, got {fill}")
        self.size = size
        self.fill = fill
        self._fill_line = bytes([fill]) * LINE
        self._lines: dict[int, bytearray] = {}
        self.poisoned: set[int] = set()

    def _check(self, address: int, length: int):
        if length < 0:
            raise ValueError(f"invalid length {length}")
        if address < 0 or address + length > self.size:
            raise ValueError(f"access [{address:#x}, +{length:#x}) outside memory of size {self.size:#x}")

    def __len__(self):
        return self.size

    # --- SparseMemory-compatible interface -------------------------------------------------------
    def read(self, address: int, length: int, **kwargs) -> bytes:
        """``length`` bytes from ``address``."""
        address, length = int(address), int(length)
        self._check(address, length)
        if length == 0:
            return b""
        first = address & _MASK
        get, fl = self._lines.get, self._fill_line
        buf = b"".join([get(a, fl) for a in range(first, address + length, LINE)])
        off = address - first
        return buf[off:off + length]

    def write(self, address: int, data, **kwargs):
        """Store the bytes of ``data`` (bytes-like or list of byte values) at ``address``."""
        address = int(address)
        if not isinstance(data, (bytes, bytearray)):
            data = bytes(data)
        n = len(data)
        self._check(address, n)
        lines, a, i = self._lines, address, 0
        while i < n:
            la = a & _MASK
            o = a - la
            k = min(LINE - o, n - i)
            if k == LINE:                       # bulk of whole lines
                k = (n - i) & _MASK
                mv = memoryview(data)
                lines.update(zip(range(a, a + k, LINE),
                                 [bytearray(mv[j:j + LINE]) for j in range(i, i + k, LINE)]))
            else:
                line = lines.get(la)
                if line is None:
                    line = lines[la] = bytearray(self._fill_line)
                line[o:o + k] = data[i:i + k]
            a += k
            i += k

    # --- typed helpers ----------------------------------------------------------------------------
    def write_i32(self, address: int, arr):
        """Write int32 values (little-endian); values outside int32 raise ValueError."""
        a = _int_array(arr, np.int32, -(1 << 31), (1 << 31) - 1, "write_i32")
        self.write(address, a.astype("<i4", copy=False).tobytes())

    def write_u32(self, address: int, arr):
        """Write u32 values (little-endian); values outside [0, 2^32) raise ValueError."""
        a = _int_array(arr, np.uint32, 0, (1 << 32) - 1, "write_u32")
        self.write(address, a.astype("<u4", copy=False).tobytes())

    def read_i32(self, address: int, n: int) -> np.ndarray:
        return np.frombuffer(self.read(address, 4 * n), dtype="<i4").astype(np.int32)

    def read_u32(self, address: int, n: int) -> np.ndarray:
        return np.frombuffer(self.read(address, 4 * n), dtype="<u4").astype(np.uint32)

    def gather_lines(self, line_addrs) -> bytes:
        """Concatenated contents of the 64 B lines at ``line_addrs`` (each 64 B aligned)."""
        addrs = np.asarray(line_addrs, dtype=np.int64).ravel()
        if addrs.size and (np.any(addrs & (LINE - 1)) or addrs.min() < 0 or addrs.max() + LINE > self.size):
            raise ValueError("gather_lines: unaligned or out-of-range line address")
        get, fl = self._lines.get, self._fill_line
        return b"".join([get(a, fl) for a in addrs.tolist()])

    # --- per-line poison -----------------------------------------------------------------------------
    def is_poisoned(self, address: int) -> bool:
        """The poison bit of the line holding byte ``address``."""
        return (int(address) & _MASK) in self.poisoned

    def set_poison(self, address: int, poisoned: bool = True):
        """Set (or clear) the poison bit of the line holding byte ``address``."""
        address = int(address)
        self._check(address, 1)
        if poisoned:
            self.poisoned.add(address & _MASK)
        else:
            self.poisoned.discard(address & _MASK)

    def poisoned_lines(self) -> list[int]:
        """Sorted addresses of the poisoned lines."""
        return sorted(self.poisoned)

    # --- inspection ---------------------------------------------------------------------------------
    def lines(self) -> list[int]:
        """Sorted addresses of the lines written so far."""
        return sorted(self._lines)

    def line_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every written line at once: (int64 addresses, ascending; uint8 contents, shape
        ``(n, 64)``), for whole-image comparisons in numpy (:func:`differing_lines`)."""
        n = len(self._lines)
        addrs = np.fromiter(self._lines.keys(), dtype=np.int64, count=n)
        data = np.frombuffer(b"".join(self._lines.values()), dtype=np.uint8).reshape(n, LINE)
        order = np.argsort(addrs, kind="stable")
        return addrs[order], data[order]

    def copy(self) -> "MemoryImage":
        m = MemoryImage(self.size, self.fill)
        m._lines = {a: bytearray(v) for a, v in self._lines.items()}
        m.poisoned = set(self.poisoned)
        return m

    def diff(self, other: "MemoryImage", limit: int = 10) -> list[tuple[int, str]]:
        """Up to ``limit`` differing lines (by content, unwritten = fill), in address order.

        Each entry is ``(address of the first differing byte, description)`` where the
        description hexdumps the line in both images and marks the differing bytes with ``^^``;
        a line whose poison bit differs is listed too (its address, "poison self=.. other=..").
        """
        out = []
        p_self, p_other = set(self.poisoned), set(other.poisoned)
        for la in sorted(self._lines.keys() | other._lines.keys() | (p_self ^ p_other)):
            x = bytes(self._lines.get(la, self._fill_line))
            y = bytes(other._lines.get(la, other._fill_line))
            ps, po = la in p_self, la in p_other
            if x == y and ps == po:
                continue
            bad = [i for i in range(LINE) if x[i] != y[i]]
            desc = [f"line {la:#x}: {len(bad)} byte(s) differ"
                    + (f", poison self={int(ps)} other={int(po)}" if ps != po else "")]
            for o in range(0, LINE, 16):
                if any(o <= i < o + 16 for i in bad):
                    desc.append("  self  " + _hexline(la + o, x[o:o + 16]))
                    desc.append("  other " + _hexline(la + o, y[o:o + 16]))
                    marks = "".join("^^ " if x[i] != y[i] else "   " for i in range(o, o + 16))
                    desc.append("  " + " " * 18 + marks.rstrip())
            out.append((la + (bad[0] if bad else 0), "\n".join(desc)))
            if len(out) >= limit:
                break
        return out

    def __eq__(self, other):
        if not isinstance(other, MemoryImage):
            return NotImplemented
        return not self.diff(other, limit=1)

    __hash__ = None

    def hexdump(self, address: int, length: int) -> str:
        """Hexdump of ``[address, address + length)`` as a string, 16 bytes per line."""
        data = self.read(address, length)
        return "\n".join(_hexline(address + o, data[o:o + 16]) for o in range(0, len(data), 16))

    hexdump_str = hexdump

    def __repr__(self):
        return f"MemoryImage(size={self.size:#x}, fill={self.fill:#04x}, lines={len(self._lines)})"
