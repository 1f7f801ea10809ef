"""The DCOH's device read and write lanes: when an engine request may go to the media."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .snoop_filter import SF_I, SF_A

__all__ = ["DeviceLanes"]


class DeviceLanes(wiring.Component):
    """Decides, each cycle, whether the engines' read and write requests go to the media, must
    snoop the host first, or wait (docs/coherence.md, rules 2 and 3).

    Combinational except ``wr_turn``. A request whose line is the host lane's event this cycle
    yields to it. Otherwise, with no BISnp outstanding to its line:

    - read: goes when the snoop filter allows it (RdCur: not A; RdOwn: I), the read queue has
      room and no host write of its line is in flight; else, when the host may hold the line,
      allocates a BITag (BISnpData, or BISnpInv for RdOwn) unless the tracker is full or the
      host lane allocates one this cycle;
    - write: goes when the snoop filter says I and the write queue has room, unless the host
      lane writes the queue this cycle (``wr_ok`` then stays high and ``wr_turn`` holds the
      host lane's writes back in the next cycle); else allocates a BITag (BISnpInv) as a read
      does, after a read lane allocation.

    Members
    -------
    rd_line, wr_line : In(line_bits)
        The requests' line addresses; ``rd_valid``, ``wr_valid``: In(1) the requests are
        valid; ``rd_own``: In(1) the read is RdOwn.
    rd_sf_state, wr_sf_state : In(2)
        Snoop-filter state of each line; ``rd_bisnp``, ``wr_bisnp``: In(1) a BISnp to the line
        is outstanding; ``rd_host_write``: In(1) a host write of the read's line is in flight.
    ready, host_valid : In(1); host_line : In(line_bits)
        The DCOH is ready; the host lane's event this cycle and its line.
    host_alloc, host_write : In(1)
        The host lane allocates a BITag / writes the write queue this cycle.
    tags_full, rd_room, wr_room : In(1)
        The BITag tracker is full; the read / write queue has room.
    rd_go, wr_go : Out(1)
        The request is taken (to the media queues).
    wr_ok : Out(1)
        The write could go but for the host lane's write.
    wr_turn : Out(1)
        Registered: the write lost the queue to the host lane last cycle; its turn now.
    rd_alloc, wr_alloc : Out(1)
        The lane allocates a BITag this cycle.
    """

    def __init__(self, *, line_bits):
        lb = line_bits
        super().__init__({
            "rd_line": In(lb), "rd_valid": In(1), "rd_own": In(1),
            "wr_line": In(lb), "wr_valid": In(1),
            "rd_sf_state": In(2), "wr_sf_state": In(2),
            "rd_bisnp": In(1), "wr_bisnp": In(1), "rd_host_write": In(1),
            "ready": In(1), "host_valid": In(1), "host_line": In(lb),
            "host_alloc": In(1), "host_write": In(1),
            "tags_full": In(1), "rd_room": In(1), "wr_room": In(1),
            "rd_go": Out(1), "wr_go": Out(1), "wr_ok": Out(1), "wr_turn": Out(1),
            "rd_alloc": Out(1), "wr_alloc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rd_yield = self.host_valid & (self.host_line == self.rd_line)
        wr_yield = self.host_valid & (self.host_line == self.wr_line)
        rd_snoop = Mux(self.rd_own, self.rd_sf_state != SF_I, self.rd_sf_state == SF_A)
        wr_snoop = self.wr_sf_state != SF_I
        rd_open = Signal()           # not yielding, no BISnp outstanding
        wr_open = Signal()
        m.d.comb += [
            rd_open.eq(self.ready & self.rd_valid & ~rd_yield & ~self.rd_bisnp),
            wr_open.eq(self.ready & self.wr_valid & ~wr_yield & ~self.wr_bisnp),
            self.rd_go.eq(rd_open & ~rd_snoop & self.rd_room & ~self.rd_host_write),
            self.rd_alloc.eq(rd_open & rd_snoop & ~self.tags_full & ~self.host_alloc),
            self.wr_ok.eq(wr_open & ~wr_snoop & self.wr_room),
            self.wr_go.eq(self.wr_ok & ~self.host_write),
            self.wr_alloc.eq(wr_open & wr_snoop & ~self.tags_full & ~self.host_alloc &
                             ~self.rd_alloc),
        ]
        m.d.sync += self.wr_turn.eq(self.wr_ok & self.host_write)
        return m
