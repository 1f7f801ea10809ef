"""RowCam: a small exact table of rows in flight, searched in one cycle (the row tracker's victims).

``n`` entries, each (valid, row index, count of that row's lines read-issued and not yet
write-acknowledged). Ports:

- ``q`` (:class:`QuerySignature`: the row is ``q.new`` when ``q.load``, else ``q.held``;
  written ``q_row`` below) -> ``hit`` (out, next cycle): a valid entry holds last cycle's
  ``q_row`` (a CAM over all entries; only a true match is a hit), as the state is in this cycle
  (after
  last cycle's ``alloc``, ``join`` and ``dec``); ``hit_idx`` (out): that entry. The compares
  are made against last cycle's entries and registered, for both candidates, and ``q.load``
  picks one (so the caller's choice between them is not followed by the compares); an entry
  allocated last cycle is compared through its ``alloc_row`` instead. ``full`` (out): no entry is free. ``free_idx``
  (out): the lowest-numbered free entry (meaningless when ``full``).
- ``q2_row`` (in 32) -> ``q2_hit`` (out, next cycle): a second, independent lookup port (same
  semantics as ``q_row``/``hit``; used by the undo logger's ensure path).
- ``alloc`` (in) with ``alloc_row``/``alloc_count``: entry ``free_idx`` becomes valid with that
  row and count (``alloc_count`` >= 1). Only when not ``full``; the caller also checks ``hit``
  first, so a row is held by at most one entry.
- ``join`` (in) with ``alloc_count``: entry ``hit_idx`` counts ``alloc_count`` more lines (a
  repeat of its row). Only when ``hit``.
- ``dec`` (in) with ``dec_idx``: one line of entry ``dec_idx`` was acknowledged; the entry is
  free the cycle after its count reaches 0. ``dec`` of an invalid entry is the caller's error.
- ``idle`` (out): no valid entry.

State changes take effect the next cycle; one ``alloc`` or ``join`` and one ``dec`` per cycle
(``alloc`` and ``dec`` never name the same entry: ``alloc`` takes a free one; ``join`` and
``dec`` of one entry combine). ``count_bits`` must hold the most lines of one row in flight.
Reset (use ``ResetInserter``) frees all. ``n`` >= 1; index ports are at least 1 bit wide.
"""
from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["RowCam", "QuerySignature"]


class QuerySignature(wiring.Signature):
    """A row query given as two candidates: the row is ``new`` when ``load``, else ``held``
    (the caller's holding register and what it takes next). Both are compared or hashed
    before ``load`` picks one, so a late ``load`` costs one multiplexer level."""

    def __init__(self, row_bits):
        super().__init__({"load": Out(1), "new": Out(row_bits), "held": Out(row_bits)})


class RowCam(wiring.Component):
    """Exact table of rows in flight, a CAM over ``n`` flip-flop entries (module docstring).

    Keep ``n`` small: every entry is compared with both queries every cycle. The
    :class:`~hw.update.rows.RowTracker` uses one as its victim table.

    Parameters
    ----------
    n : int
        Entries (>= 1).
    row_bits : int
        Row index width.
    count_bits : int
        Line count width (must hold the most lines of one row in flight).

    Members
    -------
    q : In(QuerySignature(row_bits)); hit, hit_idx, full, free_idx : Out
        Lookup (a CAM over all valid entries; ``hit`` and ``hit_idx`` for last cycle's query
        row): ``hit`` and its entry; no free entry; the lowest free entry.
    q2_row : In(row_bits); q2_hit : Out(1)
        A second, independent lookup (last cycle's ``q2_row``; the undo logger's query).
    alloc, join : In(1); alloc_row : In(row_bits); alloc_count : In(count_bits)
        Allocate ``free_idx`` for a row (not when ``full``), or add lines to ``hit_idx``.
    dec : In(1), dec_idx : In(entry bits)
        One line of an entry acknowledged; the entry frees the cycle after its count reaches 0.
    idle : Out(1)
        No valid entry.

    Raises
    ------
    ValueError
        If ``n`` < 1.
    """

    def __init__(self, n, *, row_bits=32, count_bits=4):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"RowCam: entry count must be >= 1, got {n!r}")
        self._n, self._rb, self._cb = n, row_bits, count_bits
        ib = max(1, ceil_log2(n))          # entry index width (at least 1 bit)
        super().__init__({
            "q": In(QuerySignature(row_bits)), "hit": Out(1), "hit_idx": Out(ib),
            "full": Out(1), "q2_row": In(row_bits), "q2_hit": Out(1),
            "free_idx": Out(ib),
            "alloc": In(1), "join": In(1), "alloc_row": In(row_bits), "alloc_count": In(count_bits),
            "dec": In(1), "dec_idx": In(ib),
            "idle": Out(1),
        })

    @property
    def n(self):
        return self._n

    def elaborate(self, platform):
        m = Module()
        n = self._n
        valid = Signal(n)
        rows = [Signal(self._rb, name=f"row{i}") for i in range(n)]
        cnts = [Signal(self._cb, name=f"cnt{i}") for i in range(n)]
        # one-hot lowest free entry: the lowest zero bit of ``valid``
        free_oh = Signal(n)
        m.d.comb += free_oh.eq(~valid & (valid + 1)[:n])
        # the compares of this cycle's queries, registered; an entry allocated this cycle is
        # compared next cycle through ``alloc_row``
        alloc_oh = Signal(n)
        m.d.sync += alloc_oh.eq(Mux(self.alloc, free_oh, 0))
        match, match2 = Signal(n), Signal(n)

        def compares(q):
            return Cat(Cat(rows[i] == q for i in range(n)), self.alloc_row == q)
        q = self.q
        for cmp, out in ((Mux(q.load, compares(q.new), compares(q.held)), match),
                         (compares(self.q2_row), match2)):
            pre, same = Signal(n), Signal()
            m.d.sync += Cat(pre, same).eq(cmp)
            m.d.comb += out.eq(valid & ((alloc_oh & same.replicate(n)) | (pre & ~alloc_oh)))
        m.d.comb += self.q2_hit.eq(match2.any())

        def encode(oh):       # one-hot (or zero) -> index
            return Cat(Cat(oh[i] for i in range(n) if i >> b & 1).any()
                       for b in range(max(1, ceil_log2(n))))

        m.d.comb += [
            self.hit.eq(match.any()),
            self.hit_idx.eq(encode(match)),
            self.free_idx.eq(encode(free_oh)),
            self.full.eq(valid.all()),
            self.idle.eq(~valid.any()),
        ]
        dec_oh = Signal(n)
        m.d.comb += dec_oh.eq(Mux(self.dec, 1 << self.dec_idx, 0))
        for i in range(n):
            join_i = self.join & match[i]
            with m.If(self.alloc & free_oh[i]):
                m.d.sync += [valid[i].eq(1), rows[i].eq(self.alloc_row),
                             cnts[i].eq(self.alloc_count)]
            with m.Elif(join_i & dec_oh[i]):
                m.d.sync += cnts[i].eq(cnts[i] + self.alloc_count - 1)
            with m.Elif(join_i):
                m.d.sync += cnts[i].eq(cnts[i] + self.alloc_count)
            with m.Elif(dec_oh[i]):
                m.d.sync += cnts[i].eq(cnts[i] - 1)
                with m.If(cnts[i] == 1):
                    m.d.sync += valid[i].eq(0)
        return m
