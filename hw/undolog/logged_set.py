"""LoggedSet: the set of (table, row) keys the undo logger has logged in the open batch."""
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["LoggedSet", "KEY_BITS"]

KEY_BITS = 48          # (row, table)


class LoggedSet(wiring.Component):
    """Set-associative set of (table, row) keys: one lookup and one insert per cycle.

    Keys live in a memory of ``sets`` entries of ``ways`` keys with an asynchronous read port;
    their valid bits are registers (cleared by reset and by ``clear``, so no init sweep). The
    set of a key is ``(row ^ (row >> log2(sets)) ^ table) mod sets`` (docs/training.md
    section 5).

    Parameters
    ----------
    sets : int
        Number of sets, a power of two.
    ways : int
        Keys per set.

    Members
    -------
    row : In(32)
        Row of the key looked up (and inserted).
    table : In(16)
        Table of the key.
    hit : Out(1)
        Combinational: the key is in the set. An insert is visible to the next cycle's lookup.
    insert : In(1)
        Insert the key into the lowest-numbered free way of its set (the caller inserts only
        keys that miss); with no free way, nothing is inserted and ``overflow`` counts it.
    clear : In(1)
        Empty the set (wins over an insert in the same cycle).
    overflow : Out(32)
        Inserts that found their set full, since reset (wrapping).

    Raises
    ------
    ValueError
        If ``sets`` is not a power of two or ``ways`` < 1.
    """

    def __init__(self, sets, ways):
        if not isinstance(sets, int) or sets < 1 or sets & (sets - 1):
            raise ValueError(f"LoggedSet: sets must be a power of two, got {sets!r}")
        if not isinstance(ways, int) or ways < 1:
            raise ValueError(f"LoggedSet: ways must be >= 1, got {ways!r}")
        self._sets, self._ways = sets, ways
        super().__init__({
            "row": In(32), "table": In(16), "hit": Out(1),
            "insert": In(1), "clear": In(1), "overflow": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n_sets, n_ways = self._sets, self._ways
        s_bits = exact_log2(n_sets)
        mem_sets = max(2, n_sets)         # (depth >= 2: no zero-width address in Verilog)
        m.submodules.set_mem = set_mem = Memory(shape=n_ways * KEY_BITS, depth=mem_sets, init=[])
        set_rd = set_mem.read_port(domain="comb")
        set_wr = set_mem.write_port(granularity=KEY_BITS)
        valid = Signal(mem_sets * n_ways)   # valid bits, way w of set i at bit i*n_ways + w
        key = Cat(self.row, self.table)
        h = Signal(range(mem_sets))
        m.d.comb += [h.eq((self.row ^ (self.row >> s_bits) ^ self.table) & (n_sets - 1)),
                     set_rd.addr.eq(h)]
        vbits = Signal(n_ways)
        m.d.comb += vbits.eq(valid.word_select(h, n_ways))
        m.d.comb += self.hit.eq(Cat(vbits[w] & (set_rd.data[w * KEY_BITS:(w + 1) * KEY_BITS]
                                                == key) for w in range(n_ways)).any())
        free_onehot = Signal(n_ways)      # lowest-numbered invalid way
        for w in reversed(range(n_ways)):
            with m.If(~vbits[w]):
                m.d.comb += free_onehot.eq(1 << w)
        with m.If(self.insert):
            with m.If(free_onehot != 0):
                m.d.comb += [set_wr.addr.eq(h), set_wr.data.eq(Cat([key] * n_ways)),
                             set_wr.en.eq(free_onehot)]
                m.d.sync += valid.word_select(h, n_ways).eq(vbits | free_onehot)
            with m.Else():
                m.d.sync += self.overflow.eq(self.overflow + 1)
        with m.If(self.clear):
            m.d.sync += valid.eq(0)
        return m
