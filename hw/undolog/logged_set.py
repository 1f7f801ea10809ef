"""LoggedSet: the set of (table, row) keys the undo logger has logged in the open batch."""
from amaranth.hdl import Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["LoggedSet", "KEY_BITS"]

KEY_BITS = 48          # (row, table)


class LoggedSet(wiring.Component):
    """Set-associative set of (table, row) keys: one lookup and one insert (or remove) per
    cycle.

    Keys live in a memory of ``sets`` entries of ``ways`` keys with an asynchronous read port.
    An insert or remove is written to the memories in the cycle after it is decided; that
    cycle's lookup sees it through a bypass (the written set's valid bits, and the inserted key
    compared with the looked-up one beside the memory read), so no path runs from the lookup
    through the decision into the memories. Each set's valid bits live in a second memory with
    the set's epoch: a way is valid only while its set's epoch equals the current epoch, so
    ``clear`` (and reset) empties the whole set in one cycle by advancing the epoch (a write
    still pending then is dropped). A scrubber rewrites one set per cycle without a write
    (every cycle of ``clear`` or reset included) with the current epoch, so no set's epoch lags
    by more than ``sets`` + 1 advances and never comes round again (``epoch_bits`` >
    log2(``sets`` + 2)). The current epoch is not reset: memories keep their contents over a
    reset, and each reset cycle advances it. The set of a key is
    ``(row ^ (row >> log2(sets)) ^ table) mod sets`` (docs/training.md section 5).

    Parameters
    ----------
    sets : int
        Number of sets, a power of two.
    ways : int
        Keys per set.
    epoch_bits : int or None
        Epoch width (default ``log2(sets) + 2``; tests use a narrow one to wrap it).

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
    remove : In(1)
        Remove the key (clear the valid bit of the way holding it, if any). Never in the same
        cycle as ``insert`` (the undo logger uses it only after a row whose read failed).
    clear : In(1)
        Empty the set (wins over an insert in the same cycle).
    overflow : Out(32)
        Inserts that found their set full, since reset (wrapping).

    Raises
    ------
    ValueError
        If ``sets`` is not a power of two, ``ways`` < 1 or ``epoch_bits`` too narrow.
    """

    def __init__(self, sets, ways, *, epoch_bits=None):
        if not isinstance(sets, int) or sets < 1 or sets & (sets - 1):
            raise ValueError(f"LoggedSet: sets must be a power of two, got {sets!r}")
        if not isinstance(ways, int) or ways < 1:
            raise ValueError(f"LoggedSet: ways must be >= 1, got {ways!r}")
        min_eb = (max(2, sets) + 2).bit_length()
        epoch_bits = min_eb if epoch_bits is None else epoch_bits
        if not isinstance(epoch_bits, int) or epoch_bits < min_eb:
            raise ValueError(f"LoggedSet: epoch_bits must be >= {min_eb} for {sets} sets, "
                             f"got {epoch_bits!r}")
        self._sets, self._ways, self._eb = sets, ways, epoch_bits
        super().__init__({
            "row": In(32), "table": In(16), "hit": Out(1),
            "insert": In(1), "remove": In(1), "clear": In(1), "overflow": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n_sets, n_ways, eb = self._sets, self._ways, self._eb
        s_bits = exact_log2(n_sets)
        mem_sets = max(2, n_sets)         # (depth >= 2: no zero-width address in Verilog)
        m.submodules.set_mem = set_mem = Memory(shape=n_ways * KEY_BITS, depth=mem_sets, init=[])
        set_rd = set_mem.read_port(domain="comb")
        set_wr = set_mem.write_port(granularity=KEY_BITS)
        # per set: (valid bits, epoch); valid only while the epoch is the current one
        m.submodules.valid_mem = valid_mem = Memory(shape=n_ways + eb, depth=mem_sets, init=[])
        v_rd = valid_mem.read_port(domain="comb")
        s_rd = valid_mem.read_port(domain="comb")     # the scrubber's
        v_wr = valid_mem.write_port()
        epoch = Signal(eb, reset_less=True)
        scrub = Signal(range(mem_sets), reset_less=True)   # every cycle of a reset scrubs too
        key = Signal(KEY_BITS)
        h = Signal(range(mem_sets))
        m.d.comb += [key.eq(Cat(self.row, self.table)),
                     h.eq((self.row ^ (self.row >> s_bits) ^ self.table) & (n_sets - 1)),
                     set_rd.addr.eq(h), v_rd.addr.eq(h)]

        # the insert or remove decided last cycle, written to the memories this cycle and
        # seen by this cycle's lookup through the bypass below
        pw_valid = Signal()
        pw_set = Signal(range(mem_sets))
        pw_word = Signal(n_ways + eb)     # the set's new (valid bits, epoch)
        pw_ways = Signal(n_ways)          # ways whose key is written (one-hot; 0: a removal)
        pw_key = Signal(KEY_BITS)
        advance = self.clear | ResetSignal()
        pw_now = Signal()                 # written this cycle (an advance cancels it: the
        m.d.comb += pw_now.eq(pw_valid & ~advance)   # clear empties the set anyway)
        with m.If(pw_now):
            m.d.comb += [set_wr.addr.eq(pw_set), set_wr.data.eq(Cat([pw_key] * n_ways)),
                         set_wr.en.eq(pw_ways),
                         v_wr.addr.eq(pw_set), v_wr.data.eq(pw_word), v_wr.en.eq(1)]

        same = Signal()                   # the lookup's set is the one written this cycle
        m.d.comb += same.eq(pw_valid & (pw_set == h))
        word = Signal(n_ways + eb)
        m.d.comb += word.eq(Mux(same, pw_word, v_rd.data))
        vbits = Signal(n_ways)
        m.d.comb += vbits.eq(Mux(word[n_ways:] == epoch, word[:n_ways], 0))
        key_is_pw = Signal()
        m.d.comb += key_is_pw.eq(key == pw_key)
        hit_ways = Signal(n_ways)
        m.d.comb += [hit_ways.eq(Cat(
                         vbits[w] & Mux(same & pw_ways[w], key_is_pw,
                                        set_rd.data[w * KEY_BITS:(w + 1) * KEY_BITS] == key)
                         for w in range(n_ways))),
                     self.hit.eq(hit_ways.any())]
        free_onehot = Signal(n_ways)      # lowest-numbered invalid way
        for w in reversed(range(n_ways)):
            with m.If(~vbits[w]):
                m.d.comb += free_onehot.eq(1 << w)

        with m.If(advance):
            m.d.sync += epoch.eq(epoch + 1)
        m.d.sync += [pw_set.eq(h), pw_key.eq(key), pw_valid.eq(0)]
        with m.If(self.insert & ~advance & (free_onehot != 0)):
            m.d.sync += [pw_valid.eq(1), pw_ways.eq(free_onehot),
                         pw_word.eq(Cat(vbits | free_onehot, epoch))]
        with m.Elif(self.remove & ~advance):
            m.d.sync += [pw_valid.eq(1), pw_ways.eq(0),
                         pw_word.eq(Cat(vbits & ~hit_ways, epoch))]

        # scrub: in every cycle without a write, set ``scrub`` gets the epoch in force next
        # cycle, its ways emptied unless they are valid now and stay so
        keep = Signal(n_ways)
        m.d.comb += [s_rd.addr.eq(scrub),
                     keep.eq(Mux(~advance & (s_rd.data[n_ways:] == epoch), s_rd.data[:n_ways], 0))]
        with m.If(~pw_now):
            m.d.comb += [v_wr.addr.eq(scrub), v_wr.data.eq(Cat(keep, (epoch + advance)[:eb])),
                         v_wr.en.eq(1)]
            m.d.sync += scrub.eq(scrub + 1)
        with m.If(self.insert & (free_onehot == 0)):
            m.d.sync += self.overflow.eq(self.overflow + 1)
        return m
