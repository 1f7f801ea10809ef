"""Offsets walker: checks each bag's offsets and opens the index range it covers.

Consumes ``n_bags + 1`` offsets from ``offsets`` after ``start``. For the first offset ``s`` it
strobes ``idx_start`` with ``idx_start_addr = indices_addr + 4*s``; for each next offset ``e`` it
applies checks 4-6 of docs/lookup.md and pushes one ``bags`` entry (length, or an error marker
with a code, after which it stops and holds the offending value on ``err_value``). ``idx_limit`` (exclusive byte address) only ever
covers validated bags, so the index reader never reads outside the staging region. One bag per
cycle. ``busy`` is high from ``start`` until the last entry is pushed. Reset between commands
(the engine wraps it in a ResetInserter).
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..encodings import LookupErrorCode
from .layouts import bag_layout

__all__ = ["OffsetsWalker"]


class OffsetsWalker(wiring.Component):
    """Checks each bag's offsets and opens the index range it covers (see the module docstring).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    staging_end : int
        End of the staging region (exclusive).
    max_bag : int
        Longest bag (BAG_TOO_LONG beyond).

    Members
    -------
    start : In(1)
        Begin a command (``n_bags + 1`` offsets follow on ``offsets``).
    n_bags : In(32), indices_addr : In(addr_bits)
        The command's.
    offsets : In(stream.Signature(32))
        The offsets, in order.
    bags : Out(stream.Signature(bag_layout))
        One entry per bag: its length, or an error marker (then it stops).
    idx_start : Out(1), idx_start_addr : Out(addr_bits)
        Strobe: start the index reader at ``indices_addr + 4 * offsets[0]``.
    idx_limit : Out(addr_bits + 2)
        End (exclusive) of the validated index range.
    busy : Out(1)
        From ``start`` until the last entry is pushed.
    err_value : Out(64)
        Offending value of the error marker.
    """

    def __init__(self, addr_bits, *, staging_end, max_bag):
        self._ab, self._staging_end, self._max_bag = addr_bits, staging_end, max_bag
        super().__init__({
            "start": In(1),
            "n_bags": In(32),
            "indices_addr": In(addr_bits),
            "offsets": In(stream.Signature(32)),
            "bags": Out(stream.Signature(bag_layout)),
            "idx_start": Out(1),
            "idx_start_addr": Out(addr_bits),
            "idx_limit": Out(addr_bits + 2),
            "busy": Out(1),
            "err_value": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        ab = self._ab
        s = Signal(32)
        count = Signal(32)
        e = self.offsets.payload
        end_addr = Signal(ab + 3)
        m.d.comb += end_addr.eq(self.indices_addr + (e << 2))
        entry = self.bags.payload
        value = Signal(64)
        with m.If(e < s):
            m.d.comb += [entry.err.eq(1), entry.code.eq(LookupErrorCode.OFFSETS_ORDER),
                         value.eq(e)]
        with m.Elif((e - s) > self._max_bag):
            m.d.comb += [entry.err.eq(1), entry.code.eq(LookupErrorCode.BAG_TOO_LONG),
                         value.eq(e - s)]
        with m.Elif(end_addr > self._staging_end):
            m.d.comb += [entry.err.eq(1), entry.code.eq(LookupErrorCode.ADDR_RANGE),
                         value.eq(end_addr)]
        m.d.comb += entry.len.eq(e - s)

        with m.FSM(name="walk"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [count.eq(0), self.idx_limit.eq(0)]
                    m.next = "FIRST"
            with m.State("FIRST"):
                m.d.comb += [self.busy.eq(1), self.offsets.ready.eq(1)]
                with m.If(self.offsets.valid):
                    m.d.sync += s.eq(e)
                    m.d.comb += [self.idx_start.eq(1), self.idx_start_addr.eq(end_addr)]
                    with m.If(self.n_bags == 0):
                        m.next = "DONE"
                    with m.Else():
                        m.next = "BAGS"
            with m.State("BAGS"):
                m.d.comb += [self.busy.eq(1), self.bags.valid.eq(self.offsets.valid),
                             self.offsets.ready.eq(self.bags.ready)]
                with m.If(self.bags.valid & self.bags.ready):
                    m.d.sync += count.eq(count + 1)
                    with m.If(entry.err):
                        m.d.sync += self.err_value.eq(value)
                        m.next = "DONE"
                    with m.Else():
                        m.d.sync += [s.eq(e), self.idx_limit.eq(end_addr)]
                        with m.If(count + 1 == self.n_bags):
                            m.next = "DONE"
            with m.State("DONE"):
                pass
        return m
