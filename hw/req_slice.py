"""Register slice on the device request port: requests reach the DCOH from flip-flops.

The DCOH's device lanes decide in one cycle whether a request is taken (the line's snoop-filter,
BITag and write-bucket lookups). Connected straight to the port mux, that decision would sit
between every engine's request logic and every other engine's ``ready``: one combinational
chain across the blocks (in the flattened `fpga-ecp5` netlist, the deepest path of the device:
docs/fpga.md). The slice puts flip-flops on both sides of it.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .reqport import DeviceRequestSignature

__all__ = ["StreamRegisterSlice", "DeviceRequestSlice"]


class StreamRegisterSlice(wiring.Component):
    """One stream through an output register and a one-entry skid buffer: ``o.valid`` and
    ``o.payload`` come from flip-flops, and so does ``i.ready``.

    Parameters
    ----------
    layout : shape-castable
        The payload.

    Members
    -------
    i : In(stream.Signature(layout))
        Input. ``i.ready`` is the skid buffer empty (a register).
    o : Out(stream.Signature(layout))
        Output, from the output register.

    Latency and ordering
    --------------------
    One cycle from ``i`` to ``o``; one transfer per cycle at ``o`` while ``o.ready`` stays
    high. A transfer that arrives while ``o`` stalls waits in the skid buffer, which empties into
    the output register first (``i.ready`` is low for that cycle). Order is kept; nothing is
    dropped or duplicated.

    Errors
    ------
    None: the slice holds at most two transfers and checks nothing.
    """

    def __init__(self, layout):
        super().__init__({"i": In(stream.Signature(layout)),
                          "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        skid_full = Signal()
        skid = Signal.like(i.payload)
        load = Signal()
        m.d.comb += [i.ready.eq(~skid_full), load.eq(~o.valid | o.ready)]
        with m.If(load):
            with m.If(skid_full):
                m.d.sync += [o.valid.eq(1), o.payload.eq(skid), skid_full.eq(0)]
            with m.Else():
                m.d.sync += [o.valid.eq(i.valid), o.payload.eq(i.payload)]
        with m.Elif(i.valid & ~skid_full):
            m.d.sync += [skid_full.eq(1), skid.eq(i.payload)]
        return m


class DeviceRequestSlice(wiring.Component):
    """Register slice of a device request port (see the module docstring): ``rd_req`` and
    ``wr_req`` each through a :class:`StreamRegisterSlice`; ``rd_resp`` and ``wr_resp`` pass
    through unchanged.

    Parameters
    ----------
    addr_bits : int
        Byte address width of the port.

    Members
    -------
    s : In(DeviceRequestSignature(addr_bits))
        The requester side (the port mux connects here).
    m : Out(DeviceRequestSignature(addr_bits))
        The responder side (to the DCOH).

    Latency and ordering
    --------------------
    One cycle more per read and per write request, one request per cycle per channel; each
    channel keeps its order (a read and a write issued in one cycle still reach the responder in
    one cycle unless it stalls one of them). Responses: no latency.

    Errors
    ------
    None.
    """

    def __init__(self, addr_bits):
        sig = DeviceRequestSignature(addr_bits)
        self._sig = sig
        super().__init__({"s": In(sig), "m": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        for ch in ("rd_req", "wr_req"):
            layout = self._sig.members[ch].signature.members["payload"].shape
            m.submodules[ch] = sl = StreamRegisterSlice(layout)
            wiring.connect(m, wiring.flipped(getattr(self.s, ch)), sl.i)
            wiring.connect(m, sl.o, wiring.flipped(getattr(self.m, ch)))
        for ch in ("rd_resp", "wr_resp"):
            wiring.connect(m, wiring.flipped(getattr(self.m, ch)),
                           wiring.flipped(getattr(self.s, ch)))
        return m
