"""ItemFork: the UPDATE engine's row items fork into the item queue and ``ensure`` requests."""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..counting import step
from .layouts import ensure_layout, upd_item_layout

__all__ = ["ItemFork"]


class ItemFork(wiring.Component):
    """Sends each non-empty row item on, and (unless ``nolog``) one ``ensure`` for its row.

    An item moves only when both sides take it in the same cycle (the item queue has room and,
    when logging, the ensure output is ready and fewer than ``max_ensures`` answers are due:
    ``ensure_done`` always has room for them). Items of empty bags, and every item while
    ``stop``, are dropped.

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    max_ensures : int
        Ensures sent and not yet used by the write stage, at most.

    Members
    -------
    items : In(stream.Signature(upd_item_layout))
        Row items.
    out : Out(stream.Signature(upd_item_layout))
        The items to the gradient stage.
    ensure : Out(stream.Signature(ensure_layout(addr_bits)))
        One per item when ``need_log``: ``table``, ``row``, ``addr`` = ``table_base + (row <<
        (row_dl + 6))``, ``dim_log``.
    need_log : In(1), table_id : In(16), table_base : In(addr_bits), row_dl : In(2),
    dim_log : In(2)
        The command's, stable while running.
    used : In(1)
        The write stage used one answer (frees one of ``max_ensures``).
    stop : In(1)
        Drop items.
    clear : In(1)
        Command start: no answers due.
    """

    def __init__(self, addr_bits, *, max_ensures):
        self._max = max_ensures
        super().__init__({
            "items": In(stream.Signature(upd_item_layout)),
            "out": Out(stream.Signature(upd_item_layout)),
            "ensure": Out(stream.Signature(ensure_layout(addr_bits))),
            "need_log": In(1), "table_id": In(16), "table_base": In(addr_bits),
            "row_dl": In(2), "dim_log": In(2),
            "used": In(1), "stop": In(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        ens_cnt = Signal(range(self._max + 1))   # ensures pushed, answer not yet used
        fi = self.items.payload
        ens = self.ensure
        ens_room = ens_cnt < self._max
        m.d.comb += [
            ens.payload.table.eq(self.table_id), ens.payload.row.eq(fi.index),
            ens.payload.addr.eq(self.table_base + (fi.index << (self.row_dl + 6).as_unsigned())),
            ens.payload.dim_log.eq(self.dim_log),
            self.out.payload.eq(fi),
        ]
        with m.If(self.stop | fi.empty):
            m.d.comb += self.items.ready.eq(1)           # dropped (empty bags need no work)
        with m.Else():
            ok = self.out.ready & (~self.need_log | (ens.ready & ens_room))
            m.d.comb += [
                self.items.ready.eq(ok),
                self.out.valid.eq(self.items.valid & ok),
                ens.valid.eq(self.items.valid & self.need_log & self.out.ready & ens_room),
            ]
        step(m, ens_cnt, up=ens.valid & ens.ready, down=self.used)
        with m.If(self.clear):
            m.d.sync += ens_cnt.eq(0)
        return m
