"""Test-only device for the co-simulation infrastructure's self-test.

An AXI4 slave port ``s_axi`` wired straight to the AXI4 master port ``m_axi`` (so
cocotbext-axi's ``AxiMaster`` on one side exercises ``cosim.pmem.PmemModel`` on the other), and a
one-stage register slice from ``stream_in`` to ``stream_out`` carrying a two-field struct (for
``cosim.streams``).
"""
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4Signature

__all__ = ["AxiPassthrough", "PAYLOAD"]

# Deliberately odd widths and a nested struct, so packing bugs (offsets, masks) show.
PAYLOAD = data.StructLayout({
    "tag": 5,
    "pair": data.StructLayout({"lo": 13, "hi": 7}),
    "value": 40,
})


class AxiPassthrough(wiring.Component):
    """``s_axi`` → ``m_axi`` combinational pass-through plus a ``stream_in`` → ``stream_out``
    register slice (full throughput: ready while the slice is empty or being drained)."""

    def __init__(self, *, addr_width=40, data_width=512, id_width=4):
        self._axi = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)
        super().__init__({
            "s_axi": In(self._axi),
            "m_axi": Out(self._axi),
            "stream_in": In(stream.Signature(PAYLOAD)),
            "stream_out": Out(stream.Signature(PAYLOAD)),
        })

    def elaborate(self, platform):
        m = Module()

        # wiring.connect cannot join two ports of the same direction; forward member by member.
        for name, member in self._axi.members.items():
            src, dst = getattr(self.s_axi, name), getattr(self.m_axi, name)
            if member.flow == Out:
                m.d.comb += dst.eq(src)
            else:
                m.d.comb += src.eq(dst)

        m.d.comb += self.stream_in.ready.eq(~self.stream_out.valid | self.stream_out.ready)
        with m.If(self.stream_in.ready):
            m.d.sync += [
                self.stream_out.valid.eq(self.stream_in.valid),
                self.stream_out.payload.eq(self.stream_in.payload),
            ]
        return m
