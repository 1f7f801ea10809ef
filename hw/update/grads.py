"""GradReader: the UPDATE engine's gradient stage (a bag's first item reads the bag's lines)."""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..reqport import RD_CUR, rd_req_layout
from .layouts import upd_item_layout

__all__ = ["GradReader"]


class GradReader(wiring.Component):
    """Passes row items on, reading each bag's gradient lines when its first item passes.

    The first item of a bag issues the bag's ``dim/16`` gradient line reads (RdCur, one per
    cycle, each taking a delta ring line: only while ``alloc - freed < ring_lines``) and passes
    on with its last read; other items pass on at one per cycle. While ``stop``, items are
    dropped.

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    ring_lines : int
        Delta ring lines (a power of two, :class:`DeltaRing` ``depth``).
    rd_id : int
        Request id of the gradient reads.

    Members
    -------
    items : In(stream.Signature(upd_item_layout))
        Row items in order.
    out : Out(stream.Signature(upd_item_layout))
        The same items, after their gradient reads are issued.
    rd_req : Out(stream.Signature(rd_req_layout(addr_bits)))
        Gradient line reads: line ``grads_line + (bag << dim_log) + k``.
    grads_line : In(addr_bits - 6), dim_log : In(2)
        The command's gradient lines and row size, stable while running.
    freed : In(range(2 * ring_lines))
        Delta ring lines freed (ring pointer of the oldest line in use).
    alloc : Out(range(2 * ring_lines))
        Delta ring lines taken (one per gradient read issued).
    issue : Out(1)
        A gradient read is issued this cycle.
    stop : In(1)
        Drop items, restart the bag's line count.
    clear : In(1)
        Command start: ``alloc`` and the line count to 0.
    """

    def __init__(self, addr_bits, *, ring_lines, rd_id):
        self._ab, self._n, self._id = addr_bits, ring_lines, rd_id
        pb = ceil_log2(ring_lines) + 1
        super().__init__({
            "items": In(stream.Signature(upd_item_layout)),
            "out": Out(stream.Signature(upd_item_layout)),
            "rd_req": Out(stream.Signature(rd_req_layout(addr_bits))),
            "grads_line": In(addr_bits - 6), "dim_log": In(2),
            "freed": In(pb), "alloc": Out(pb), "issue": Out(1),
            "stop": In(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        pb = ceil_log2(self._n) + 1
        ga = self.alloc
        kg = Signal(3)
        gi = self.items.payload
        g_rd = self.rd_req
        g_last = kg == (1 << self.dim_log) - 1
        space = (ga - self.freed)[:pb] < self._n
        m.d.comb += [
            g_rd.payload.id.eq(self._id), g_rd.payload.op.eq(RD_CUR),
            g_rd.payload.addr.eq(self.grads_line + (gi.bag << self.dim_log) + kg),
            self.out.payload.eq(gi),
        ]
        g_issue = self.issue
        with m.If(self.stop):
            m.d.comb += self.items.ready.eq(1)
            m.d.sync += kg.eq(0)
        with m.Elif(self.items.valid & gi.first):
            m.d.comb += [g_rd.valid.eq(space & (~g_last | self.out.ready)),
                         g_issue.eq(g_rd.valid & g_rd.ready)]
            with m.If(g_issue):
                with m.If(g_last):
                    m.d.sync += kg.eq(0)
                    m.d.comb += [self.out.valid.eq(1), self.items.ready.eq(1)]
                with m.Else():
                    m.d.sync += kg.eq(kg + 1)
        with m.Elif(self.items.valid):
            m.d.comb += [self.out.valid.eq(1), self.items.ready.eq(self.out.ready)]
        with m.If(g_issue):
            m.d.sync += ga.eq(ga + 1)
        with m.If(self.clear):
            m.d.sync += [ga.eq(0), kg.eq(0)]
        return m
