"""Inclusive set-associative snoop filter: per line state I, S or A (docs/coherence.md).

``sets`` × ``ways`` entries ``{state, tag}``, set = low ``log2(sets)`` bits of the line address.
One memory per way with ``n_lookup`` asynchronous read ports (LUT RAM on an FPGA) and one write
port; a write is visible to lookups from the next cycle. After reset an init sweep writes I to
every set (``sets`` cycles, ``ready`` low meanwhile), because memories are not reset.

Lookup port ``i`` (combinational): ``lk[i].line`` in; ``hit``, ``way`` (hit way), ``state`` (I on
a miss), ``free`` / ``free_way`` (first way in state I), and per way ``way_state``/``way_line``
(the line each way holds, for victim selection) out.
Write: ``wr_en``, ``wr_line`` (gives set and tag), ``wr_way``, ``wr_state``.
"""
from amaranth.hdl import Module, Signal, Const
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["SnoopFilter", "SF_I", "SF_S", "SF_A"]

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

    Members
    -------
    ready : Out(1)
        The init sweep (``sets`` cycles after reset) is done.
    lk : In(LookupSignature(line_bits, ways)).array(n_lookup)
        Combinational lookups: ``line`` in; ``hit``, ``way``, ``state`` (I on a miss), ``free`` /
        ``free_way`` (first way in state I), per way ``way_state``/``way_line`` out.
    wr_en : In(1), wr_line : In(line_bits), wr_way : In(range(ways)), wr_state : In(2)
        Write one entry (visible to lookups from the next cycle).

    Raises
    ------
    ValueError
        If ``sets`` is not a power of two, ``ways`` < 1, or ``line_bits`` too small.
    """

    def __init__(self, *, sets, ways, line_bits, n_lookup):
        if sets < 1 or sets & (sets - 1):
            raise ValueError(f"sets must be a power of two, got {sets!r}")
        if ways < 1:
            raise ValueError(f"ways must be >= 1, got {ways!r}")
        if line_bits <= exact_log2(sets):
            raise ValueError(f"line_bits {line_bits} too small for {sets} sets")
        self._sets, self._ways, self._line_bits, self._n = sets, ways, line_bits, n_lookup
        self._set_bits = exact_log2(sets)
        super().__init__({
            "ready": Out(1),
            "lk": In(LookupSignature(line_bits, ways)).array(n_lookup),
            "wr_en": In(1), "wr_line": In(line_bits), "wr_way": In(range(ways)),
            "wr_state": In(2),
        })

    def elaborate(self, platform):
        m = Module()
        sb, tb = self._set_bits, self._line_bits - self._set_bits
        entry = data.StructLayout({"state": 2, "tag": tb})

        def set_of(line):
            return line[:sb] if sb else Const(0, 1)

        init_busy = Signal(init=1)
        init_set = Signal(max(sb, 1))
        with m.If(init_busy):
            m.d.sync += init_set.eq(init_set + 1)
            with m.If(init_set == self._sets - 1):
                m.d.sync += init_busy.eq(0)
        m.d.comb += self.ready.eq(~init_busy)

        rd = [[None] * self._ways for _ in range(self._n)]
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
        return m
