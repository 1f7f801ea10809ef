"""DeltaRing: gradient lines -> rounded, saturated per-lane deltas, in a ring of delta lines."""
from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..reqport import rd_resp_layout
from .layouts import DELTA_BITS

__all__ = ["DeltaRing", "LANES"]

LANES = 16


class DeltaRing(wiring.Component):
    """The UPDATE engine's deltas: ``delta = round_half_even(lr * grad / 2^frac_bits)`` per lane
    of each gradient line, saturated to [-2^32, 2^32] (``DELTA_BITS``), stored in a ring of
    ``depth`` delta lines in arrival order.

    Latency: a gradient line is in the ring 3 cycles after its response (register, multiply,
    round and write); ``filled`` counts it from then. The ring's read port is synchronous.

    Parameters
    ----------
    depth : int
        Delta lines in the ring (a power of two).
    frac_bits : int
        Fraction bits of ``lr``.

    Members
    -------
    resp : In(stream.Signature(rd_resp_layout()))
        Gradient line responses (``data``: 16 int32 lanes); always ready. A response with
        ``err`` sets ``err`` (its line is still written, the engine stops on ``err``).
    lr : In(32)
        Unsigned Q(32-f).f learning rate, stable while lines arrive.
    filled : Out(range(2 * depth))
        Delta lines written (ring pointer modulo ``2 * depth``).
    written : Out(1)
        A delta line is written this cycle.
    busy : Out(1)
        A gradient line is in the pipeline.
    rd_addr : In(range(depth)), rd_en : In(1), rd_data : Out(LANES * DELTA_BITS)
        Synchronous read port (data the cycle after ``rd_en``).
    err : Out(1)
        Sticky until ``clear``: a gradient response with ``err``.
    clear : In(1)
        Command start: ``filled`` and ``err`` to 0.

    Raises
    ------
    ValueError
        If ``depth`` is not a power of two.
    """

    def __init__(self, depth, *, frac_bits):
        if not isinstance(depth, int) or depth < 1 or depth & (depth - 1):
            raise ValueError(f"DeltaRing: depth must be a power of two, got {depth!r}")
        self._depth, self._f = depth, frac_bits
        super().__init__({
            "resp": In(stream.Signature(rd_resp_layout())),
            "lr": In(32),
            "filled": Out(ceil_log2(depth) + 1), "written": Out(1), "busy": Out(1),
            "rd_addr": In(range(depth)), "rd_en": In(1), "rd_data": Out(LANES * DELTA_BITS),
            "err": Out(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        f = self._f
        dpb = ceil_log2(self._depth)
        m.submodules.dmem = dmem = Memory(shape=LANES * DELTA_BITS, depth=self._depth, init=[])
        d_wr = dmem.write_port()
        d_rd = dmem.read_port(domain="sync")
        m.d.comb += [d_rd.addr.eq(self.rd_addr), d_rd.en.eq(self.rd_en),
                     self.rd_data.eq(d_rd.data)]

        gresp = self.resp
        d0_v = Signal()
        d0_data = Signal(512)
        d1_v = Signal()
        m.d.comb += [gresp.ready.eq(1), self.busy.eq(d0_v | d1_v), self.written.eq(d1_v)]
        m.d.sync += [d0_v.eq(gresp.valid), d0_data.eq(gresp.payload.data), d1_v.eq(d0_v)]
        with m.If(gresp.valid & gresp.payload.err):
            m.d.sync += self.err.eq(1)
        deltas = []
        for i in range(LANES):
            g = d0_data[i * 32:(i + 1) * 32].as_signed()
            p = Signal(signed(65), name=f"prod{i}")
            m.d.sync += p.eq(self.lr * g)
            if f == 0:
                d = p
            else:
                q = p >> f                       # floor (arithmetic shift)
                r = p.as_unsigned()[:f]
                half = 1 << (f - 1)
                up = (r > half) | ((r == half) & q[0])
                d = Signal(signed(66), name=f"delta{i}")
                m.d.comb += d.eq(q + up)
            lim = 1 << 32
            ds = Mux(d > lim, lim, Mux(d < -lim, -lim, d))
            deltas.append(ds[:DELTA_BITS])
        m.d.comb += [d_wr.addr.eq(self.filled[:dpb]), d_wr.data.eq(Cat(*deltas)),
                     d_wr.en.eq(d1_v)]
        m.d.sync += self.filled.eq(self.filled + d1_v)
        with m.If(self.clear):
            m.d.sync += [self.filled.eq(0), self.err.eq(0)]
        return m
