"""The DCOH's hazard table: in-flight media writes per line-address hash.

``WriteBuckets``: per bucket (the low ``log2(n)`` bits of a line address) the number of media
writes issued and not yet answered. ``inc`` counts a write when it is decided, ``dec`` uncounts
it when its B response returns (one of each per cycle). ``q[i].line`` → ``q[i].busy``
(combinational) says a write to a line with the same hash may be in flight; a read waits for
``busy`` low so it cannot pass such a write in the media controller.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib.memory import Memory
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["WriteBuckets"]


class LineQuery(wiring.Signature):
    """A combinational query: ``line`` out, one answer bit (``out_name``) in."""

    def __init__(self, line_bits, out_name):
        super().__init__({"line": Out(line_bits), out_name: In(1)})


class LineStrobe(wiring.Signature):
    """A one-cycle event about a line: ``en`` and ``line`` out."""

    def __init__(self, line_bits):
        super().__init__({"en": Out(1), "line": Out(line_bits)})


class WriteBuckets(wiring.Component):
    """Per-bucket count of media writes in flight (see the module docstring).

    Two counter memories per bucket, ``issued`` and ``retired``, each only ever incremented
    (modulo ``2 ** w`` with ``2 ** (w - 1) > max_count``); a bucket is busy when they differ. One
    increment of each per cycle, so both fit one write port each (compact in Verilog and in LUT
    RAM). After reset an init sweep zeroes both (``n`` cycles, ``ready`` low).

    Parameters
    ----------
    n : int
        Buckets (a power of two): the low ``log2(n)`` bits of a line address.
    max_count : int
        Writes of one bucket in flight at most.
    line_bits : int
        Line address width.
    n_query : int
        Query ports.

    Members
    -------
    ready : Out(1)
        The init sweep is done.
    inc, dec : In(LineStrobe(line_bits))
        Count a write when it is decided; uncount it when its response returns.
    q : In(LineQuery(line_bits, "busy")).array(n_query)
        ``q[i].line`` -> ``q[i].busy`` (combinational): a write with the same hash may be in
        flight.

    Raises
    ------
    ValueError
        If ``n`` is not a power of two.
    """

    def __init__(self, *, n, max_count, line_bits, n_query=1):
        if n < 1 or n & (n - 1):
            raise ValueError(f"bucket count must be a power of two, got {n!r}")
        self._n, self._w, self._hb = n, max_count.bit_length() + 1, exact_log2(n)
        super().__init__({
            "ready": Out(1),
            "inc": In(LineStrobe(line_bits)),
            "dec": In(LineStrobe(line_bits)),
            "q": In(LineQuery(line_bits, "busy")).array(n_query),
        })

    def elaborate(self, platform):
        m = Module()
        hb, n, w = self._hb, self._n, self._w

        def bucket(line):
            return line[:hb] if hb else 0

        init_busy = Signal(init=1)
        init_idx = Signal(max(hb, 1))
        with m.If(init_busy):
            m.d.sync += init_idx.eq(init_idx + 1)
            with m.If(init_idx == n - 1):
                m.d.sync += init_busy.eq(0)
        m.d.comb += self.ready.eq(~init_busy)

        rd = {}
        for name, strobe in (("issued", self.inc), ("retired", self.dec)):
            mem = Memory(shape=w, depth=n, init=[])
            m.submodules[name] = mem
            own = mem.read_port(domain="comb")
            wp = mem.write_port()
            m.d.comb += own.addr.eq(bucket(strobe.line))
            with m.If(init_busy):
                m.d.comb += [wp.addr.eq(init_idx), wp.en.eq(1), wp.data.eq(0)]
            with m.Else():
                m.d.comb += [wp.addr.eq(bucket(strobe.line)), wp.en.eq(strobe.en),
                             wp.data.eq(own.data + 1)]
            rd[name] = []
            for q in self.q:
                p = mem.read_port(domain="comb")
                m.d.comb += p.addr.eq(bucket(q.line))
                rd[name].append(p.data)
        for i, q in enumerate(self.q):
            m.d.comb += q.busy.eq(rd["issued"][i] != rd["retired"][i])
        return m
