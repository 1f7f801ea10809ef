"""Row issuer: one line read per cycle for each line of each row item.

For a row item it issues ``2**dim_log`` reads (id ``rd_id``) at line addresses
``table_line + (index << dim_log) + k`` and writes one tag per read into the in-flight FIFO
(``tags``); for an empty-bag item it writes the same number of ``empty`` tags without reads. A
read is issued only when the tag FIFO has room, so the FIFO depth bounds the row reads in flight.
``busy`` is high while an item is being issued. Reset between commands.

With ``log`` set, the first line read of each row item also pushes the row index on ``rows``
(the undo-log tee; the read waits until ``rows`` is ready); with ``log`` low ``rows`` stays idle
and nothing else changes.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..reqport import rd_req_layout, RD_CUR
from .layouts import item_layout, tag_layout

__all__ = ["RowIssuer"]


class RowIssuer(wiring.Component):
    """One line read per cycle for each line of each row item (see the module docstring).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    rd_id : int
        Request id of the row reads.

    Members
    -------
    items : In(stream.Signature(item_layout))
        Row items; an item is taken with its last line's read (or tag).
    rd_req : Out(stream.Signature(rd_req_layout(addr_bits)))
        Line reads ``table_line + (index << dim_log) + k`` (RdCur); none for an empty item.
    tags : Out(stream.Signature(tag_layout))
        One tag per line, read or empty, in issue order; a read waits for room here.
    rows : Out(stream.Signature(32))
        With ``log``: the row index of each item, with its first line read.
    log : In(1), dim_log : In(2), table_line : In(addr_bits - 6)
        The command's, stable while running.
    """

    def __init__(self, addr_bits, *, rd_id=0):
        self._rd_id = rd_id
        super().__init__({
            "items": In(stream.Signature(item_layout)),
            "rd_req": Out(stream.Signature(rd_req_layout(addr_bits))),
            "tags": Out(stream.Signature(tag_layout)),
            "rows": Out(stream.Signature(32)),
            "log": In(1),
            "dim_log": In(2),
            "table_line": In(addr_bits - 6),
        })

    def elaborate(self, platform):
        m = Module()
        k = Signal(3)
        it = self.items.payload
        last_line = k == (1 << self.dim_log) - 1
        tag = self.tags.payload
        need_row = self.log & (k == 0)
        m.d.comb += [
            self.rd_req.payload.id.eq(self._rd_id),
            self.rd_req.payload.op.eq(RD_CUR),
            self.rd_req.payload.addr.eq(self.table_line + (it.index << self.dim_log) + k),
            self.rd_req.valid.eq(self.items.valid & ~it.empty & self.tags.ready &
                                 (~need_row | self.rows.ready)),
            tag.k.eq(k), tag.first.eq(it.first), tag.last.eq(it.last), tag.empty.eq(it.empty),
            # undo-log tee: the row index, with the row's first line read
            self.rows.payload.eq(it.index),
            self.rows.valid.eq(need_row & self.rd_req.valid & self.rd_req.ready),
        ]
        step = Signal()
        with m.If(it.empty):
            m.d.comb += [self.tags.valid.eq(self.items.valid), step.eq(self.items.valid &
                                                                      self.tags.ready)]
        with m.Else():
            m.d.comb += [self.tags.valid.eq(self.rd_req.valid & self.rd_req.ready),
                         step.eq(self.rd_req.valid & self.rd_req.ready)]
        with m.If(step):
            with m.If(last_line):
                m.d.sync += k.eq(0)
                m.d.comb += self.items.ready.eq(1)
            with m.Else():
                m.d.sync += k.eq(k + 1)
        return m
