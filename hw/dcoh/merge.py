"""Round-robin merge of two valid/ready streams of one layout.

When both inputs are valid the one not served last goes first; the grant is held while the
output waits for ``ready`` (payload stable while valid). No buffering, no added latency.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RoundRobinMerge"]


class RoundRobinMerge(wiring.Component):
    """Round-robin merge of two streams of one layout (see the module docstring).

    Parameters
    ----------
    layout : ShapeLike
        Payload shape of the three streams.

    Members
    -------
    a, b : In(stream.Signature(layout))
        The inputs; when both are valid the one not served last goes first.
    o : Out(stream.Signature(layout))
        The merged stream; the grant is held while ``o`` waits for ``ready``. No buffering, no
        added latency.
    """

    def __init__(self, layout):
        super().__init__({"a": In(stream.Signature(layout)), "b": In(stream.Signature(layout)),
                          "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        last_b = Signal()   # b was granted last
        hold = Signal()     # output valid and not taken last cycle: keep the grant
        held_b = Signal()
        sel_b = Signal()
        with m.If(hold):
            m.d.comb += sel_b.eq(held_b)
        with m.Elif(self.a.valid & self.b.valid):
            m.d.comb += sel_b.eq(~last_b)
        with m.Else():
            m.d.comb += sel_b.eq(self.b.valid)
        with m.If(sel_b):
            m.d.comb += [self.o.valid.eq(self.b.valid), self.o.payload.eq(self.b.payload),
                         self.b.ready.eq(self.o.ready)]
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.a.valid), self.o.payload.eq(self.a.payload),
                         self.a.ready.eq(self.o.ready)]
        m.d.sync += [hold.eq(self.o.valid & ~self.o.ready), held_b.eq(sel_b)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += last_b.eq(sel_b)
        return m
