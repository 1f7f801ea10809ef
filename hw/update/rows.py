"""RowTracker: the rows the UPDATE engine has in flight (docs/training.md 4).

A set-associative table in block-RAM-style memories (``ways`` ways of ``entries / ways`` sets,
synchronous read ports) plus a small exact victim CAM (:class:`~hw.update.row_cam.RowCam`) for
rows whose set is full. A row is held by at most one entry, table or victim, while any of its
lines is read-issued and not yet write-acknowledged.
"""
from functools import reduce
from operator import xor

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..counting import step
from .row_cam import QuerySignature, RowCam

__all__ = ["RowTracker", "row_set"]


def row_set(row, set_bits, row_bits=32):
    """The table set of ``row``: its ``row_bits`` folded by XOR into ``set_bits`` bits.

    Works on an Amaranth value (hardware) or a Python int (models and tests)."""
    if isinstance(row, int):
        mask = (1 << set_bits) - 1
        return reduce(xor, ((row >> i) & mask for i in range(0, row_bits, set_bits)), 0)
    return reduce(xor, (row[i:i + set_bits] for i in range(0, row_bits, set_bits)))


def _first(bits):
    """(any, index of the lowest set bit) of a short list of 1-bit values."""
    idx = Const(0, max(1, ceil_log2(len(bits))))
    for i in reversed(range(len(bits))):
        idx = Mux(bits[i], i, idx)
    return Cat(*bits).any(), idx


class RowTracker(wiring.Component):
    """Rows in flight: a hashed set-associative table in memories plus an exact victim CAM.

    Every entry holds a row index and two line counters: ``issued`` (lines read-issued or
    joined) and ``acked`` (lines write-acknowledged), both modulo ``2**count_bits``; the entry
    holds its row while they differ. A row lives in way ``w`` of set ``row_set(row)``
    (:func:`row_set`, an XOR fold of the row bits) or, when that set has no free way, in the
    victim CAM; a row never occupies two entries. Entry indices: table entries are
    ``set * ways + way`` (0 .. ``entries - 1``), victim ``v`` is ``entries + v``.

    Latency: the lookup results of cycle t describe the query row (``q2_row``) of cycle t - 1,
    against the state after every ``alloc``, ``join`` and ``dec`` of cycles up to t - 1 (the
    table read at t - 1 is transparent to that cycle's writes; a ``dec`` of cycle t - 1, whose
    counter write lands at t, is bypassed: whether it names the query's set is compared at
    t - 1 and registered, as are the victim CAM's compares). ``alloc`` and ``join`` of cycle t
    act on that row.

    Capacity and ordering: a new row waits (``full``) only when its set's ``ways`` entries and
    all ``victims`` hold other rows; at most ``entries + victims`` rows are in flight. One
    ``alloc`` or ``join`` and one ``dec`` per cycle; they may name one entry.

    Clearing: entries of lines that will never be acknowledged (a stopped command) are freed by
    ``clear``; when any line is outstanding it starts a sweep of the table (one set per cycle,
    ``entries / ways`` cycles) during which every lookup reports ``full`` and no hit and
    ``q2_hit`` is 1. Reset also sweeps (memories keep their contents over a reset). ``dec``
    during a sweep, or of an entry not in flight, is the caller's error.

    Parameters
    ----------
    entries : int
        Table entries, a power of two >= 2 * ``ways`` and >= 2 * ``victims`` (victim indices
        fit below ``2 * entries``).
    ways : int
        Table ways (a power of two >= 2).
    victims : int
        Victim CAM entries (>= 1).
    row_bits : int
        Row index width.
    count_bits : int
        Line counter width: more than the most lines of one row in flight.

    Members
    -------
    q : In(QuerySignature(row_bits)); hit, hit_idx, full, free_idx : Out
        Lookup of the row ``q.new`` when ``q.load``, else ``q.held`` (result next cycle; both
        candidates are hashed and compared before ``q.load`` picks one): the row is in flight
        at ``hit_idx``; no entry can take it (``full``); the entry an ``alloc`` takes
        (meaningless when ``full``).
    q2_row : In(row_bits); q2_hit : Out(1)
        A second lookup (result next cycle; the undo logger's query).
    alloc, join : In(1); alloc_count : In(count_bits)
        The looked-up row takes ``free_idx`` (not when ``full`` or ``hit``), or adds lines to
        ``hit_idx`` (only when ``hit``), counting ``alloc_count`` >= 1 lines.
    dec : In(1), dec_idx : In(entry bits)
        One line of entry ``dec_idx`` was acknowledged.
    clear : In(1)
        Free every entry (sweeps the table when a line is outstanding).
    idle : Out(1)
        No line outstanding.

    Raises
    ------
    ValueError
        If a size parameter is out of range.
    """

    def __init__(self, entries, *, ways=4, victims=16, row_bits=32, count_bits=4):
        if not (isinstance(ways, int) and ways >= 2 and ways & (ways - 1) == 0):
            raise ValueError(f"RowTracker: ways must be a power of two >= 2, got {ways!r}")
        if not (isinstance(entries, int) and entries >= 2 * ways and
                entries & (entries - 1) == 0):
            raise ValueError(f"RowTracker: entries must be a power of two >= 2 * ways, "
                             f"got {entries!r}")
        if not (isinstance(victims, int) and 1 <= victims <= entries // 2):
            raise ValueError(f"RowTracker: victims must be 1..entries/2, got {victims!r}")
        self._n, self._ways, self._v = entries, ways, victims
        self._rb, self._cb = row_bits, count_bits
        ib = self.index_bits(entries)
        super().__init__({
            "q": In(QuerySignature(row_bits)), "hit": Out(1), "hit_idx": Out(ib),
            "full": Out(1), "free_idx": Out(ib),
            "q2_row": In(row_bits), "q2_hit": Out(1),
            "alloc": In(1), "join": In(1), "alloc_count": In(count_bits),
            "dec": In(1), "dec_idx": In(ib),
            "clear": In(1), "idle": Out(1),
        })

    @staticmethod
    def index_bits(entries):
        """Width of an entry index: the table's and the victims' indices (``2 * entries``)."""
        return exact_log2(entries) + 1

    @property
    def sets(self):
        return self._n // self._ways

    def elaborate(self, platform):
        m = Module()
        W, S, rb, cb = self._ways, self.sets, self._rb, self._cb
        sb, wb = exact_log2(S), exact_log2(W)
        m.submodules.victims = vic = ResetInserter(self.clear)(RowCam(self._v, row_bits=rb,
                                                                      count_bits=cb))
        q = self.q
        q_r, q2_r = Signal(rb), Signal(rb)           # the rows whose results are shown
        m.d.sync += [q_r.eq(Mux(q.load, q.new, q.held)), q2_r.eq(self.q2_row)]
        q_set, q2_set = Signal(sb), Signal(sb)       # the sets of this cycle's queries
        new_set, held_set = Signal(sb), Signal(sb)   # (hashed before the choice)
        m.d.comb += [new_set.eq(row_set(q.new, sb, rb)), held_set.eq(row_set(q.held, sb, rb)),
                     q_set.eq(Mux(q.load, new_set, held_set)),
                     q2_set.eq(row_set(self.q2_row, sb, rb))]
        set_q = Signal(sb)                           # row_set(q_r), registered with it
        m.d.sync += set_q.eq(q_set)

        sweeping = Signal(init=1)                    # memories hold anything after a reset
        sweep_set = Signal(sb)
        dec_d, dec_set_d, dec_way_d = Signal(), Signal(sb), Signal(wb)   # a dec of last cycle
        d_vic, dec_set = self.dec_idx[-1], self.dec_idx[wb:wb + sb]
        m.d.sync += [dec_d.eq(self.dec & ~d_vic), dec_set_d.eq(dec_set),
                     dec_way_d.eq(self.dec_idx[:wb])]
        # last cycle's dec names the set of last cycle's query (its counter write lands now,
        # after this cycle's results were read): compared a cycle early, registered
        dec_q_set, dec_q2_set = Signal(), Signal()
        m.d.sync += [dec_q_set.eq(self.dec & ~d_vic & Mux(q.load, dec_set == new_set,
                                                             dec_set == held_set)),
                     dec_q2_set.eq(self.dec & ~d_vic & (dec_set == q2_set))]

        match, free, match2, iss = [], [], [], []
        ent_way, ent_tab, upd = Signal(wb), Signal(), Signal()
        for w in range(W):
            ways = self._way_memories(m, w, sb)
            rc_w, rc_q, rc_q2, ak_w, ak_q, ak_q2, ak_a = ways
            m.d.comb += [rc_q.addr.eq(q_set), ak_q.addr.eq(q_set),
                         rc_q2.addr.eq(q2_set), ak_q2.addr.eq(q2_set), ak_a.addr.eq(dec_set)]

            def busy(rc, ak, dec_here):
                byp = dec_here & (dec_way_d == w)
                return Mux(byp, rc.data[rb:] != (ak.data + 1)[:cb], rc.data[rb:] != ak.data)
            b1, b2 = busy(rc_q, ak_q, dec_q_set), busy(rc_q2, ak_q2, dec_q2_set)
            match.append(b1 & (rc_q.data[:rb] == q_r))
            match2.append(b2 & (rc_q2.data[:rb] == q2_r))
            free.append(~b1)
            iss.append(rc_q.data[rb:])
            # counters: the sweep zeroes a set; else alloc/join add lines, dec counts one
            wr_here = upd & ent_tab & (ent_way == w)
            m.d.comb += [
                rc_w.addr.eq(Mux(sweeping, sweep_set, set_q)),
                rc_w.data.eq(Mux(sweeping, 0, Cat(q_r, (rc_q.data[rb:] + self.alloc_count)[:cb]))),
                rc_w.en.eq(sweeping | wr_here),
                ak_w.addr.eq(Mux(sweeping, sweep_set, dec_set_d)),
                ak_w.data.eq(Mux(sweeping, 0, (ak_a.data + 1)[:cb])),
                ak_w.en.eq(sweeping | (dec_d & (dec_way_d == w))),
            ]

        t_hit, t_hit_way = _first(match)
        t_free, t_free_way = _first(free)
        vb = max(1, ceil_log2(self._v))            # RowCam's index width
        pad = Const(0, exact_log2(self._n) - vb)
        vic_idx, vic_free = Cat(vic.hit_idx, pad, Const(1, 1)), Cat(vic.free_idx, pad, Const(1, 1))
        m.d.comb += [
            vic.q.load.eq(q.load), vic.q.new.eq(q.new), vic.q.held.eq(q.held),
            vic.q2_row.eq(self.q2_row), vic.alloc_row.eq(q_r),
            vic.alloc_count.eq(self.alloc_count),
            vic.dec.eq(self.dec & d_vic), vic.dec_idx.eq(self.dec_idx),
            self.hit.eq(~sweeping & (t_hit | vic.hit)),
            self.hit_idx.eq(Mux(t_hit, Cat(t_hit_way, set_q, Const(0, 1)), vic_idx)),
            self.full.eq(sweeping | (~t_free & vic.full)),
            self.free_idx.eq(Mux(t_free, Cat(t_free_way, set_q, Const(0, 1)), vic_free)),
            self.q2_hit.eq(sweeping | Cat(*match2).any() | vic.q2_hit),
            upd.eq(self.alloc | self.join),
            ent_tab.eq(Mux(self.join, t_hit, t_free)),
            ent_way.eq(Mux(self.join, t_hit_way, t_free_way)),
            vic.alloc.eq(self.alloc & ~t_free), vic.join.eq(self.join & ~t_hit),
        ]

        # lines outstanding (all entries): a clear sweeps only when some are
        out = Signal(range(2 * (self._n + self._v) << cb))
        m.d.comb += self.idle.eq(out == 0)
        with m.If(self.clear):
            m.d.sync += out.eq(0)
            with m.If(out != 0):
                m.d.sync += [sweeping.eq(1), sweep_set.eq(0)]
        with m.Else():
            step(m, out, up=upd, down=self.dec, up_by=self.alloc_count)
        with m.If(sweeping & ~self.clear):
            m.d.sync += sweep_set.eq(sweep_set + 1)
            with m.If(sweep_set == S - 1):
                m.d.sync += sweeping.eq(0)
        return m

    def _way_memories(self, m, w, sb):
        """Way ``w``: (row, issued) and acked memories with their ports."""
        S, rb, cb = self.sets, self._rb, self._cb
        rc = Memory(shape=rb + cb, depth=S, init=[])
        ak = Memory(shape=cb, depth=S, init=[])
        m.submodules[f"rc{w}"], m.submodules[f"ak{w}"] = rc, ak
        rc_w, ak_w = rc.write_port(), ak.write_port()
        rc_q = rc.read_port(transparent_for=(rc_w,))
        rc_q2 = rc.read_port(transparent_for=(rc_w,))
        ak_q = ak.read_port(transparent_for=(ak_w,))
        ak_q2 = ak.read_port(transparent_for=(ak_w,))
        ak_a = ak.read_port(transparent_for=(ak_w,))
        return rc_w, rc_q, rc_q2, ak_w, ak_q, ak_q2, ak_a
