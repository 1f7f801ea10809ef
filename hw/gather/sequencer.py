"""Bag sequencer: turns bag lengths and the index list into row items, checking each index.

For each bag entry from ``bags`` it emits one ``items`` entry per index (``first``/``last`` mark
the bag's ends) or, for an empty bag, a single item with ``empty`` set. A bag's entry is taken
in the same cycle as its first item, so bag transitions cost no cycle when the inputs are ready:
one item per cycle at any pooling factor, an empty bag takes one cycle. The first failure, either an error marker from the walker or an index >=
``table_rows`` (INDEX_RANGE), stops it and is held on ``err_*`` with the bag number ``bag``.
``done`` rises when all ``n_bags`` bags were emitted. ``rows`` counts rows of bags whose last
item was emitted. Reset between commands.
"""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..encodings import LookupErrorCode
from .layouts import bag_layout, item_layout, LEN_BITS

__all__ = ["BagSequencer"]


class BagSequencer(wiring.Component):
    """Bag lengths and indices to row items, checking each index (see the module docstring).

    Members
    -------
    bags : In(stream.Signature(bag_layout))
        Bag lengths (or an error marker) from the walker.
    indices : In(stream.Signature(32))
        The index list, in order.
    items : Out(stream.Signature(item_layout))
        One item per index (``first``/``last`` mark the bag's ends), or one ``empty`` item per
        empty bag; one per cycle.
    table_rows, n_bags : In(32)
        The command's (an index >= ``table_rows`` is INDEX_RANGE).
    marker_value : In(64)
        Offending value of a walker error marker (``walker.err_value``).
    done : Out(1)
        All ``n_bags`` bags emitted.
    err : Out(1), err_code : Out(4), err_value : Out(64)
        The first failure (held).
    bag : Out(32)
        Bag of the current item (and of an error).
    rows : Out(32)
        Rows of bags whose last item was emitted.
    """

    bags: In(stream.Signature(bag_layout))
    indices: In(stream.Signature(32))
    items: Out(stream.Signature(item_layout))
    table_rows: In(32)
    n_bags: In(32)
    marker_value: In(64)     # offending value of a walker error marker (walker.err_value)
    done: Out(1)
    err: Out(1)
    err_code: Out(4)
    err_value: Out(64)
    bag: Out(32)
    rows: Out(32)

    def elaborate(self, platform):
        m = Module()
        rem = Signal(LEN_BITS)        # rows of the current bag still to emit
        cur_len = Signal(LEN_BITS)
        first = Signal()
        have = rem != 0
        idx = self.indices.payload
        entry = self.bags.payload
        item = self.items.payload
        open_ = ~self.err & (self.bag != self.n_bags)
        # a non-empty bag entry is loaded in the same cycle its first item goes out
        load = ~have & self.bags.valid & ~entry.err & (entry.len != 0) & open_
        active = have | load
        c_rem = Mux(have, rem, entry.len)
        c_first = Mux(have, first, 1)
        c_len = Mux(have, cur_len, entry.len)

        with m.If(active):
            m.d.comb += [
                self.items.valid.eq(self.indices.valid & (idx < self.table_rows) & ~self.err),
                item.index.eq(idx), item.first.eq(c_first), item.last.eq(c_rem == 1),
                self.indices.ready.eq(self.items.ready & self.items.valid),
            ]
        with m.Else():
            m.d.comb += [
                self.items.valid.eq(self.bags.valid & ~entry.err & (entry.len == 0) & open_),
                item.first.eq(1), item.last.eq(1), item.empty.eq(1),
            ]
        fire = self.items.valid & self.items.ready

        with m.If(fire):
            # pop the entry of a bag being loaded, or of an empty bag
            m.d.comb += self.bags.ready.eq(~have)
        with m.If(fire & active):
            m.d.sync += [first.eq(0), rem.eq(c_rem - 1), cur_len.eq(c_len)]
            with m.If(c_rem == 1):
                m.d.sync += [self.bag.eq(self.bag + 1), self.rows.eq(self.rows + c_len)]
        with m.Elif(fire):               # empty bag
            m.d.sync += self.bag.eq(self.bag + 1)
        with m.If(~have & self.bags.valid & entry.err & open_):
            m.d.sync += [self.err.eq(1), self.err_code.eq(entry.code),
                         self.err_value.eq(self.marker_value)]
        with m.If(active & self.indices.valid & (idx >= self.table_rows) & ~self.err):
            m.d.sync += [self.err.eq(1), self.err_code.eq(LookupErrorCode.INDEX_RANGE),
                         self.err_value.eq(idx)]
        m.d.comb += self.done.eq(~have & (self.bag == self.n_bags))
        return m
