"""Inclusive set-associative snoop filter: per line state I, S or A (docs/coherence.md).

``sets`` × ``ways`` entries ``{state, tag}``, set = low ``log2(sets)`` bits of the line address.
One memory per way and one write port; a write is visible to lookups from the next cycle. After
reset an init sweep writes I to every set (``sets`` cycles, ``ready`` low meanwhile), because
memories are not reset.

Lookup port ``i``: ``lk[i].line`` in; ``hit``, ``way`` (hit way), ``state`` (I on a miss),
``free`` / ``free_way`` (first way in state I), and per way ``way_state``/``way_line`` (the line
each way holds, for victim selection) out. A port reads its way memories either asynchronously
(LUT RAM on an FPGA) or, for a port listed in ``registered``, synchronously: its requester holds
``lk[i].line`` in a register and names in ``lk_next`` the line that register takes next (``load``,
``line``); each way is read a cycle ahead at both candidates (two synchronous read ports,
transparent for the way's write port, so a write in that cycle is seen) and the answer is picked
by the registered ``load``. Both kinds answer alike in every cycle.
Write: ``wr_en``, ``wr_line`` (gives set and tag), ``wr_way``, ``wr_state``.
"""
from amaranth.hdl import Module, Signal, Const, Mux, Assert
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["SnoopFilter", "LookupSignature", "NextLookupSignature", "SF_I", "SF_S", "SF_A"]

SF_I, SF_S, SF_A = 0, 1, 2


class LookupSignature(wiring.Signature):
    """A snoop-filter lookup: ``line`` out; hit, way, state, free way and every way's state in."""

    def __init__(self, line_bits, ways):
        super().__init__({
            "line": Out(line_bits),
            "hit": In(1), "way": In(range(ways)), "state": In(2),
            "free": In(1), "free_way": In(range(ways)),
            "way_state": In(data.ArrayLayout(2, ways)),
            "way_line": In(data.ArrayLayout(line_bits, ways)),
        })


class NextLookupSignature(wiring.Signature):
    """The line a registered lookup's requester holds next: ``load`` (its register takes
    ``line`` at this cycle's edge; else it keeps the line it holds) and ``line``, out."""

    def __init__(self, line_bits):
        super().__init__({"load": Out(1), "line": Out(line_bits)})


class SnoopFilter(wiring.Component):
    """Inclusive set-associative snoop filter: per line state I, S or A (see the module docstring).

    Parameters
    ----------
    sets : int
        Sets (a power of two): the low ``log2(sets)`` bits of the line address.
    ways : int
        Ways per set (>= 1).
    line_bits : int
        Line address width (more than ``log2(sets)``).
    n_lookup : int
        Lookup ports.
    registered : tuple of int
        Lookup ports read synchronously (each with an ``lk_next`` entry, in this order); the
        others read asynchronously.

    Members
    -------
    ready : Out(1)
        The init sweep (``sets`` cycles after reset) is done.
    lk : In(LookupSignature(line_bits, ways)).array(n_lookup)
        Lookups: ``line`` in; ``hit``, ``way``, ``state`` (I on a miss), ``free`` /
        ``free_way`` (first way in state I), per way ``way_state``/``way_line`` out, in the
        same cycle (after the writes of every earlier cycle).
    lk_next : In(NextLookupSignature(line_bits)).array(len(registered))
        Present when ``registered`` is not empty: entry ``k`` gives the line port
        ``registered[k]`` looks up in the next cycle (an assertion checks that it does).
    wr_en : In(1), wr_line : In(line_bits), wr_way : In(range(ways)), wr_state : In(2)
        Write one entry (visible to lookups from the next cycle).

    Raises
    ------
    ValueError
        If ``sets`` is not a power of two, ``ways`` < 1, ``line_bits`` too small, or a
        ``registered`` port does not exist or is named twice.
    """

    def __init__(self, *, sets, ways, line_bits, n_lookup, registered=()):
        if sets < 1 or sets & (sets - 1):
            raise ValueError(f"sets must be a power of two, got {sets!r}")
        if ways < 1:
            raise ValueError(f"ways must be >= 1, got {ways!r}")
        if line_bits <= exact_log2(sets):
            raise ValueError(f"line_bits {line_bits} too small for {sets} sets")
        registered = tuple(registered)
        if len(set(registered)) != len(registered) or any(
                not 0 <= i < n_lookup for i in registered):
            raise ValueError(f"registered must name distinct lookup ports of 0..{n_lookup - 1}, "
                             f"got {registered!r}")
        self._sets, self._ways, self._line_bits, self._n = sets, ways, line_bits, n_lookup
        self._registered = registered
        self._set_bits = exact_log2(sets)
        members = {
            "ready": Out(1),
            "lk": In(LookupSignature(line_bits, ways)).array(n_lookup),
            "wr_en": In(1), "wr_line": In(line_bits), "wr_way": In(range(ways)),
            "wr_state": In(2),
        }
        if registered:
            members["lk_next"] = In(NextLookupSignature(line_bits)).array(len(registered))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        sb, tb = self._set_bits, self._line_bits - self._set_bits
        entry = data.StructLayout({"state": 2, "tag": tb})
        set_of = self._set_of

        init_busy = Signal(init=1)
        init_set = Signal(max(sb, 1))
        with m.If(init_busy):
            m.d.sync += init_set.eq(init_set + 1)
            with m.If(init_set == self._sets - 1):
                m.d.sync += init_busy.eq(0)
        m.d.comb += self.ready.eq(~init_busy)

        rd = [[None] * self._ways for _ in range(self._n)]
        loaded = {}
        for k, i in enumerate(self._registered):
            loaded[i] = Signal(name=f"lk{i}_loaded")
            m.d.sync += loaded[i].eq(self.lk_next[k].load)
        for w in range(self._ways):
            mem = Memory(shape=entry, depth=self._sets, init=[])
            m.submodules[f"way{w}"] = mem
            wp = mem.write_port()
            with m.If(init_busy):
                m.d.comb += [wp.addr.eq(init_set), wp.en.eq(1), wp.data.state.eq(SF_I)]
            with m.Else():
                m.d.comb += [wp.addr.eq(set_of(self.wr_line)),
                             wp.en.eq(self.wr_en & (self.wr_way == w)),
                             wp.data.state.eq(self.wr_state),
                             wp.data.tag.eq(self.wr_line[sb:])]
            for i in range(self._n):
                if i in self._registered:
                    rd[i][w] = self._read_ahead(m, mem, wp, i, w, loaded[i])
                else:
                    rp = mem.read_port(domain="comb")
                    m.d.comb += rp.addr.eq(set_of(self.lk[i].line))
                    rd[i][w] = rp.data

        for i in range(self._n):
            lk = self.lk[i]
            for w in reversed(range(self._ways)):
                e = rd[i][w]
                valid = e.state != SF_I
                line = Signal(self._line_bits, name=f"lk{i}_way{w}_line")
                m.d.comb += line.eq(e.tag << sb | (lk.line[:sb] if sb else 0))
                m.d.comb += [lk.way_state[w].eq(e.state), lk.way_line[w].eq(line)]
                with m.If(valid & (e.tag == lk.line[sb:])):
                    m.d.comb += [lk.hit.eq(1), lk.way.eq(w), lk.state.eq(e.state)]
                with m.If(~valid):
                    m.d.comb += [lk.free.eq(1), lk.free_way.eq(w)]
        for k, i in enumerate(self._registered):
            # the requester looks up the line it named
            nx = self.lk_next[k]
            named = Signal(self._line_bits, name=f"lk{i}_named")
            m.d.sync += [named.eq(Mux(nx.load, nx.line, self.lk[i].line)),
                         Assert(self.lk[i].line == named,
                                f"snoop filter: lookup {i} is not the line named a cycle ahead")]
        return m

    def _read_ahead(self, m, mem, wp, i, w, loaded):
        """Way ``w``'s entry for registered lookup ``i``: read at both lines it may hold next,
        transparent for this cycle's write, and picked by ``loaded`` (last cycle's ``load``)."""
        nx = self.lk_next[self._registered.index(i)]
        rp_new = mem.read_port(transparent_for=(wp,))
        rp_held = mem.read_port(transparent_for=(wp,))
        m.d.comb += [rp_new.addr.eq(self._set_of(nx.line)),
                     rp_held.addr.eq(self._set_of(self.lk[i].line))]
        data = Signal(mem.shape, name=f"lk{i}_way{w}_entry")
        m.d.comb += data.eq(Mux(loaded, rp_new.data, rp_held.data))
        return data

    def _set_of(self, line):
        """The set index of a line address (its low bits; a constant 0 for one set)."""
        sb = self._set_bits
        return line[:sb] if sb else Const(0, 1)
