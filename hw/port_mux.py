"""Shares one device request port among several requesters.

Each requester ``i`` owns the ids in ``ids[i]`` (disjoint); read and write responses are routed
back by id. Requests are arbitrated with fixed priority (requester 0 highest) per channel; a grant
is held while the granted request waits for ``ready``, so the merged stream keeps the stream
rules (payload stable while valid). Two arbitration modes:

- combinational (default): the grant is chosen in the cycle from the requests valid in it; no
  added latency, but every requester's ``ready`` depends on the ``valid`` of those above it;
- registered (``registered_grant`` names the channel, ``"rd"`` and/or ``"wr"``; the device's
  port registers its read grant): the grant is a register, chosen in the cycle before from the
  requests valid then. A requester's ``ready`` is its grant and the port's ``ready``, so no
  requester's ``ready`` depends on another's request. After each transfer the grant passes to
  the highest-priority other requester with a request valid, if any (so under contention the
  served requester alternates with the highest-priority waiting one, and a lower one waits as
  under fixed priority); otherwise it stays, and a requester streaming alone keeps one
  transfer per cycle. A request that finds the grant on an idle requester waits one cycle for
  it.

Routing is combinational.
A response whose id belongs to no requester is accepted and dropped (it cannot happen with a
conforming responder; ``stray`` pulses for an in-RTL assertion or a counter).
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .reqport import DeviceRequestSignature

__all__ = ["RequestPortMux"]


class RequestPortMux(wiring.Component):
    """Shares one device request port among several requesters (see the module docstring): fixed
    priority per channel (requester 0 highest), grant held while the request waits, responses
    routed by id; combinational or registered grants.

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    ids : sequence of sequences of int
        The ids of each requester (disjoint).
    registered_grant : collection of str
        The channels (``"rd"``, ``"wr"``) whose grant is chosen a cycle ahead, in a register
        (module docstring); the others arbitrate combinationally. Default: none.

    Members
    -------
    req_<i> : In(DeviceRequestSignature(addr_bits))
        One responder-side port per requester.
    mem : Out(DeviceRequestSignature(addr_bits))
        The shared port.
    stray : Out(1)
        Pulse: a response whose id belongs to no requester was dropped.

    Raises
    ------
    ValueError
        If the id sets overlap, there is no requester, or ``registered_grant`` names a channel
        other than ``"rd"`` and ``"wr"``.
    """

    def __init__(self, addr_bits, ids, *, registered_grant=()):
        ids = [tuple(x) for x in ids]
        flat = [i for x in ids for i in x]
        if len(set(flat)) != len(flat):
            raise ValueError(f"requester id sets overlap: {ids!r}")
        if not ids:
            raise ValueError("need at least one requester")
        self._ids = ids
        if isinstance(registered_grant, str):
            registered_grant = (registered_grant,)
        self._registered = frozenset(registered_grant)
        if not self._registered <= {"rd", "wr"}:
            raise ValueError(f"registered_grant names channels 'rd' and 'wr', got "
                             f"{sorted(self._registered)!r}")
        members = {f"req_{i}": In(DeviceRequestSignature(addr_bits)) for i in range(len(ids))}
        members["mem"] = Out(DeviceRequestSignature(addr_bits))
        members["stray"] = Out(1)
        super().__init__(members)

    def _arbitrate(self, m, name, srcs, dst):
        """``dst`` carries the granted one of ``srcs``; the grant is combinational or registered
        (the module docstring)."""
        grant = Signal(range(len(srcs)), name=f"{name}_grant")
        if name in self._registered:
            self._registered_grant(m, srcs, dst, grant)
        else:
            self._combinational_grant(m, name, srcs, dst, grant)
        with m.Switch(grant):
            for i, src in enumerate(srcs):
                with m.Case(i):
                    m.d.comb += [dst.valid.eq(src.valid), dst.payload.eq(src.payload),
                                 src.ready.eq(dst.ready)]

    def _combinational_grant(self, m, name, srcs, dst, grant):
        """The held grant while the granted request waits, else the highest-priority request
        valid in this cycle."""
        n = len(srcs)
        held = Signal(range(n), name=f"{name}_held")
        hold = Signal(name=f"{name}_hold")
        with m.If(hold):
            m.d.comb += grant.eq(held)
        with m.Else():
            for i in reversed(range(n)):
                with m.If(srcs[i].valid):
                    m.d.comb += grant.eq(i)
        m.d.sync += [hold.eq(dst.valid & ~dst.ready), held.eq(grant)]

    def _registered_grant(self, m, srcs, dst, grant):
        """``grant`` is a register: held while the granted request waits; after a transfer, or
        while the granted requester has no request, set to the highest-priority requester with a
        request valid in this cycle other than the one just served; else kept."""
        with m.If(~dst.valid | dst.ready):
            # (the granted requester, if valid, is taken now: not a candidate while ready;
            # written without the port's valid so no other requester's logic shares it)
            for i in reversed(range(len(srcs))):
                with m.If(srcs[i].valid & ~(dst.ready & (grant == i))):
                    m.d.sync += grant.eq(i)

    def _route(self, m, src, dsts, stray):
        hit = 0
        for ids, dst in zip(self._ids, dsts):
            mine = 0
            for i in ids:
                mine = mine | (src.payload.id == i)
            hit = hit | mine
            m.d.comb += [dst.payload.eq(src.payload), dst.valid.eq(src.valid & mine)]
            with m.If(mine):
                m.d.comb += src.ready.eq(dst.ready)
        with m.If(~hit):
            m.d.comb += [src.ready.eq(1), stray.eq(src.valid)]

    def elaborate(self, platform):
        m = Module()
        reqs = [getattr(self, f"req_{i}") for i in range(len(self._ids))]
        self._arbitrate(m, "rd", [r.rd_req for r in reqs], self.mem.rd_req)
        self._arbitrate(m, "wr", [r.wr_req for r in reqs], self.mem.wr_req)
        rd_stray, wr_stray = Signal(), Signal()
        self._route(m, self.mem.rd_resp, [r.rd_resp for r in reqs], rd_stray)
        self._route(m, self.mem.wr_resp, [r.wr_resp for r in reqs], wr_stray)
        m.d.comb += self.stray.eq(rd_stray | wr_stray)
        return m
