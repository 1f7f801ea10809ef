"""LoggedSet: the set of (table, row) keys the undo logger has logged in the open batch."""
from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["LoggedSet", "KEY_BITS"]

KEY_BITS = 48          # (row, table)


class LoggedSet(wiring.Component):
    """Set-associative set of (table, row) keys with a pipelined lookup: a key is loaded in one
    cycle and its answer (``hit``, ``hit_way``, ``free_way``) comes from registered memory read
    data in the next; one load and one insert (or remove) per cycle.

    Keys live in a memory of ``sets`` entries of ``ways`` keys, each set's valid bits with the
    set's epoch in a second memory; both are read through synchronous read ports at the loaded
    key's set, and the read data is held (read enable low) while the key stays loaded. Every
    write decided after the read was issued is applied to the held answer by
    :class:`SetPatch` (a same-set bypass in registers), so the answer is exact in every cycle
    after the load, with every insert, remove and clear up to the previous cycle included. An
    insert or remove is written to the memories in the cycle after it is decided. A way is
    valid only while its set's epoch equals the current epoch, so ``clear`` (and reset) empties
    the whole set in one cycle by advancing the epoch (a write still pending then is dropped).
    A scrubber rewrites one set per cycle without a write (every cycle of ``clear`` or reset
    included; in other cycles only if no write reached that set since its read) with the
    current epoch, so no set's epoch lags by more than ``sets`` + 1 advances and never comes
    round again (``epoch_bits`` > log2(``sets`` + 2)). The current epoch is not reset: memories
    keep their contents over a reset, and each reset cycle advances it. The set of a key is
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
    row : In(32), table : In(16)
        The key to load.
    load : In(1)
        The key enters the lookup stage (its set is read this cycle); it stays there until the
        next load.
    hit : Out(1)
        The loaded key is in the set, from the cycle after its load on (combinational from
        registered read data and the bypass; insert, remove and clear are seen one cycle after
        they are decided). After reset the loaded key is (table 0, row 0), in an empty set.
    hit_way : Out(ways)
        One-hot: the way holding the loaded key (0 on a miss).
    set_index : Out(range(sets))
        The loaded key's set.
    free_way : Out(ways)
        One-hot: the lowest-numbered invalid way of the loaded key's set (0 if it is full).
    insert : In(1)
        Insert the loaded key into ``free_way`` (the caller inserts only keys that miss); with
        no free way, nothing is inserted and ``overflow`` counts it.
    remove : In(1), remove_set : In(range(sets)), remove_way : In(ways)
        Clear the valid bits ``remove_way`` of set ``remove_set`` (the ``set_index`` and
        ``free_way`` of an earlier insert). Never in the same cycle as ``insert``.
    clear : In(1)
        Empty the set (wins over an insert or remove in the same cycle).
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
        mem_sets = max(2, sets)           # (depth >= 2: no zero-width address in Verilog)
        super().__init__({
            "row": In(32), "table": In(16), "load": In(1),
            "hit": Out(1), "hit_way": Out(ways), "set_index": Out(range(mem_sets)),
            "free_way": Out(ways),
            "insert": In(1), "remove": In(1), "remove_set": In(range(mem_sets)),
            "remove_way": In(ways), "clear": In(1), "overflow": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n_sets, n_ways, eb = self._sets, self._ways, self._eb
        s_bits = exact_log2(n_sets)
        mem_sets = max(2, n_sets)
        m.submodules.set_mem = set_mem = Memory(shape=n_ways * KEY_BITS, depth=mem_sets, init=[])
        set_rd = set_mem.read_port(domain="sync")
        set_wr = set_mem.write_port(granularity=KEY_BITS)
        # per set: (valid bits, epoch); valid only while the epoch is the current one
        m.submodules.valid_mem = valid_mem = Memory(shape=n_ways + eb, depth=mem_sets, init=[])
        v_rd = valid_mem.read_port(domain="sync")
        s_rd = valid_mem.read_port(domain="sync")     # the scrubber's
        v_wr = valid_mem.write_port(granularity=1)
        epoch = Signal(eb, reset_less=True)
        advance = self.clear | ResetSignal()
        with m.If(advance):
            m.d.sync += epoch.eq(epoch + 1)

        # ---- lookup stage: the loaded key; its set read with the load, held after it -------
        in_key, in_set = Signal(KEY_BITS), Signal(range(mem_sets))
        m.d.comb += [in_key.eq(Cat(self.row, self.table)),
                     in_set.eq((self.row ^ (self.row >> s_bits) ^ self.table) & (n_sets - 1))]
        key, q_set = Signal(KEY_BITS), Signal(range(mem_sets))
        with m.If(self.load):
            m.d.sync += [key.eq(in_key), q_set.eq(in_set)]
        m.d.comb += [set_rd.addr.eq(in_set), set_rd.en.eq(self.load),
                     v_rd.addr.eq(in_set), v_rd.en.eq(self.load), self.set_index.eq(q_set)]

        # ---- the answer: held read data with the writes since the read patched in --------
        m.submodules.patch = patch = SetPatch(n_ways, n_ways + eb)
        word = Signal(n_ways + eb)
        m.d.comb += word.eq(Mux(patch.word_valid, patch.word, v_rd.data))
        vbits = Signal(n_ways)
        m.d.comb += vbits.eq(Mux(word[n_ways:] == epoch, word[:n_ways] & ~patch.removed, 0))
        m.d.comb += self.hit_way.eq(Cat(
            vbits[w] & Mux(patch.key_written[w], patch.key_match[w],
                           set_rd.data[w * KEY_BITS:(w + 1) * KEY_BITS] == key)
            for w in range(n_ways)))
        m.d.comb += self.hit.eq(self.hit_way.any())
        for w in reversed(range(n_ways)):             # lowest-numbered invalid way
            with m.If(~vbits[w]):
                m.d.comb += self.free_way.eq(1 << w)

        # ---- decided this cycle: an insert or remove, written next cycle -------------------
        ins = Signal()
        rem = Signal()
        new_word = Signal(n_ways + eb)    # the loaded key's set after its insert
        m.d.comb += [ins.eq(self.insert & ~advance & self.free_way.any()),
                     rem.eq(self.remove & ~advance),
                     new_word.eq(Cat(vbits | self.free_way, epoch))]
        with m.If(self.insert & ~self.free_way.any()):
            m.d.sync += self.overflow.eq(self.overflow + 1)
        pw_valid = Signal()
        pw_set = Signal(range(mem_sets))
        pw_word = Signal(n_ways + eb)     # data and bit enables of the valid memory write
        pw_en = Signal(n_ways + eb)
        pw_ways = Signal(n_ways)          # ways whose key is written (one-hot; 0: a removal)
        pw_key = Signal(KEY_BITS)
        m.d.sync += [pw_valid.eq(ins | rem), pw_key.eq(key)]
        with m.If(ins):
            m.d.sync += [pw_set.eq(q_set), pw_word.eq(new_word), pw_en.eq(-1),
                         pw_ways.eq(self.free_way)]
        with m.Else():
            m.d.sync += [pw_set.eq(self.remove_set), pw_word.eq(0),
                         pw_en.eq(self.remove_way), pw_ways.eq(0)]
        pw_now = Signal()                 # written this cycle (an advance cancels it: the
        m.d.comb += pw_now.eq(pw_valid & ~advance)   # clear empties the set anyway)
        with m.If(pw_now):
            m.d.comb += [set_wr.addr.eq(pw_set), set_wr.data.eq(Cat([pw_key] * n_ways)),
                         set_wr.en.eq(pw_ways),
                         v_wr.addr.eq(pw_set), v_wr.data.eq(pw_word), v_wr.en.eq(pw_en)]

        # ---- the bypass for the key in the stage next cycle (``load`` only picks the patch
        # of a key loaded now or that of the key staying: it depends on this cycle's ``hit``)
        m.d.comb += [
            patch.load.eq(self.load),
            # the write made this cycle (the read of a key loaded now does not see it)
            patch.a_insert.eq(pw_now & (pw_set == in_set) & pw_ways.any()),
            patch.a_remove.eq(pw_now & (pw_set == in_set) & ~pw_ways.any()),
            patch.a_word.eq(pw_word),
            patch.a_ways.eq(Mux(pw_ways.any(), pw_ways, pw_en[:n_ways])),
            patch.a_match.eq(in_key == pw_key),
            # the write decided this cycle (made next cycle, after every read issued so far)
            patch.insert.eq(ins), patch.ins_word.eq(new_word), patch.ins_way.eq(self.free_way),
            patch.ins_new_set.eq(q_set == in_set), patch.ins_new_match.eq(in_key == key),
            patch.remove.eq(rem), patch.rm_way.eq(self.remove_way),
            patch.rm_new_set.eq(self.remove_set == in_set),
            patch.rm_held_set.eq(self.remove_set == q_set),
            patch.advance.eq(advance)]

        # ---- scrubber: in every cycle without a write, set ``scrub`` gets the epoch in force
        # next cycle, its ways emptied unless they are valid now and stay so; its read data
        # (issued last cycle) is used only if no write reached the set since (else it waits)
        scrub = Signal(range(mem_sets), reset_less=True)
        stale = Signal(init=1)            # a write reached ``scrub`` after its read
        scrub_wr = Signal()
        keep = Signal(n_ways)
        m.d.comb += [scrub_wr.eq(~pw_now & (advance | ~stale)),
                     keep.eq(Mux(~advance & (s_rd.data[n_ways:] == epoch),
                                 s_rd.data[:n_ways], 0))]
        with m.If(scrub_wr):
            m.d.comb += [v_wr.addr.eq(scrub), v_wr.data.eq(Cat(keep, (epoch + advance)[:eb])),
                         v_wr.en.eq(-1)]
        scrub_nx = Signal(range(mem_sets))
        m.d.comb += [scrub_nx.eq((scrub + scrub_wr)[:len(scrub)]), s_rd.addr.eq(scrub_nx)]
        m.d.sync += [scrub.eq(scrub_nx), stale.eq(pw_now & (pw_set == scrub_nx))]
        return m


class SetPatch(wiring.Component):
    """The writes to the loaded key's set made after its read, in registers: the bypass of
    :class:`LoggedSet`'s pipelined lookup.

    Each cycle computes the patch for the key in the lookup stage next cycle: for a key loaded
    now, from empty (the read is issued now), then the write made this cycle (a read sees the
    memory before that cycle's write); for the key staying, from the current patch; then the
    write decided this cycle (an insert of the key in the stage, or a removal; written next
    cycle), then an advance of the epoch (an empty set). An insert replaces the set's valid
    word (with the epoch) and records, for its way, whether the written key is the loaded one;
    a remove clears valid bits over whatever came before. ``load`` and ``insert`` depend on
    the lookup's own answer (they come late in the cycle), so each of the four outcomes is
    computed without them and they only select one. The patch is registered, so it reads as
    of the cycle after.

    Parameters
    ----------
    ways : int
        Keys per set.
    word_bits : int
        Width of a set's valid word (valid bits, then the epoch).

    Members
    -------
    load : In(1)
        A key is loaded this cycle (its patch starts empty).
    a_insert, a_remove : In(1); a_word : In(word_bits); a_ways : In(ways); a_match : In(1)
        The write made this cycle reaches the set of the key offered for loading: an insert of
        valid word ``a_word`` into way ``a_ways`` of a key that is (``a_match``) the offered
        one, or a removal of ways ``a_ways``.
    insert : In(1); ins_word : In(word_bits); ins_way : In(ways)
        The key in the stage is inserted this cycle: its set's valid word becomes ``ins_word``,
        its way is ``ins_way``. Never with ``advance``.
    ins_new_set, ins_new_match : In(1)
        The key in the stage and the key offered for loading share their set; they are equal.
    remove : In(1); rm_way : In(ways)
        Ways ``rm_way`` of a set are removed this cycle (never with ``insert``).
    rm_new_set, rm_held_set : In(1)
        That set is the one of the key offered for loading; of the key in the stage.
    advance : In(1)
        The epoch advances (clear or reset): the set reads as empty.
    word_valid : Out(1); word : Out(word_bits)
        The set's valid word was replaced since the read (reset: an empty word).
    removed : Out(ways)
        Valid bits cleared since the read or the last replaced word.
    key_written : Out(ways); key_match : Out(ways)
        The way's key was written since the read, and the key written is the loaded one.
    """

    def __init__(self, ways, word_bits):
        super().__init__({
            "load": In(1),
            "a_insert": In(1), "a_remove": In(1), "a_word": In(word_bits), "a_ways": In(ways),
            "a_match": In(1),
            "insert": In(1), "ins_word": In(word_bits), "ins_way": In(ways),
            "ins_new_set": In(1), "ins_new_match": In(1),
            "remove": In(1), "rm_way": In(ways), "rm_new_set": In(1), "rm_held_set": In(1),
            "advance": In(1),
            "word_valid": Out(1, init=1), "word": Out(word_bits), "removed": Out(ways),
            "key_written": Out(ways), "key_match": Out(ways),
        })
        self._ways = ways

    def elaborate(self, platform):
        m = Module()
        zero = Const(0, self._ways)
        cur = (self.word_valid, self.word, self.removed, self.key_written, self.key_match)
        empty = (Const(0), Const(0, len(self.word)), zero, zero, zero)

        def insert(p, word, ways, match):
            return (Const(1), word, zero, p[3] | ways, (p[4] & ~ways) | Mux(match, ways, 0))

        def remove(p, ways):
            return p[:2] + (p[2] | ways,) + p[3:]

        def choose(cond, a, b):
            return tuple(Mux(cond, x, y) for x, y in zip(a, b))

        empty_word = (Const(1), Const(0, len(self.word)), zero)

        made = choose(self.a_insert, insert(empty, self.a_word, self.a_ways, self.a_match),
                      choose(self.a_remove, remove(empty, self.a_ways), empty))
        outcomes = {}             # (load, insert) -> next patch
        for load, base, ins_reaches, match, rm_reaches in (
                (1, made, self.ins_new_set, self.ins_new_match, self.rm_new_set),
                (0, cur, Const(1), Const(1), self.rm_held_set)):
            outcomes[load, 1] = choose(ins_reaches,
                                       insert(base, self.ins_word, self.ins_way, match), base)
            no_ins = choose(self.remove & rm_reaches, remove(base, self.rm_way), base)
            outcomes[load, 0] = choose(self.advance, empty_word + no_ins[3:], no_ins)
        nxt = choose(self.load,
                     choose(self.insert, outcomes[1, 1], outcomes[1, 0]),
                     choose(self.insert, outcomes[0, 1], outcomes[0, 0]))
        m.d.sync += [f.eq(v) for f, v in zip(cur, nxt)]
        return m
