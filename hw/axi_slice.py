"""AXI4 register slice: every input of the master side comes from a flip-flop.

The media adapter's AXI signals reach deep into the device (R data into the DCOH and the
engines, the readys into the write queue and the lanes' arbitration). Without a slice the
slave's signals drive that logic combinationally, which costs FPGA timing (the path starts at
the slave) and simulation time (Verilator evaluates all logic reached from an input port on
every input change). The slice cuts both: the device side sees only registers.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature

__all__ = ["AXI4RegisterSlice"]

# (channel, valid, ready, payload members); a signature without user bits lacks awuser/ruser
_REQUESTS = (
    ("ar", "arvalid", "arready", ("arid", "araddr", "arlen", "arsize", "arburst")),
    ("aw", "awvalid", "awready", ("awid", "awaddr", "awlen", "awsize", "awburst", "awuser")),
    ("w", "wvalid", "wready", ("wdata", "wstrb", "wlast")),
)
_RESPONSES = (
    ("r", "rvalid", "rready", ("rid", "rdata", "rresp", "rlast", "ruser")),
    ("b", "bvalid", "bready", ("bid", "bresp")),
)


class AXI4RegisterSlice(wiring.Component):
    """AXI4 register slice between a master (``s``) and a slave (``m``).

    Parameters
    ----------
    signature : AXI4Signature
        The AXI4 signature of both sides.

    Members
    -------
    s : In(signature)
        Slave side (the master connects here).
    m : Out(signature)
        Master side (to the slave).

    Latency and ordering
    --------------------
    - AR, AW, W (master to slave): a skid buffer of one entry per channel. ``s.*ready`` is a
      register (the buffer is empty); no latency is added: the request goes out in the cycle
      it is valid, and one the slave refuses waits in the buffer and goes out first. The slave
      side sees one transfer per cycle as long as it accepts.
    - R, B (slave to master): one pipeline register per channel, one cycle of latency, one
      transfer per cycle (``m.*ready`` = register empty or ``s.*ready``).
    - Each channel keeps its order; nothing is reordered across channels beyond what AXI4
      allows (a write's AW and W still reach the slave in their own order; B still follows
      the slave's acknowledgement, so a write is never reported before the slave took it).

    Errors
    ------
    None: the slice holds no state beyond one transfer per channel and checks nothing.
    """

    def __init__(self, signature: AXI4Signature):
        if not isinstance(signature, AXI4Signature):
            raise TypeError(f"signature must be an AXI4Signature, got {signature!r}")
        self._sig = signature
        super().__init__({"s": In(signature), "m": Out(signature)})

    def _members(self, names):
        """The payload members of ``names`` that this signature has."""
        return [n for n in names if n in self._sig.members]

    def elaborate(self, platform):
        m = Module()
        for name, valid, ready, payload in _REQUESTS:
            self._skid(m, name, valid, ready, self._members(payload))
        for name, valid, ready, payload in _RESPONSES:
            self._register(m, name, valid, ready, self._members(payload))
        return m

    def _skid(self, m, name, valid, ready, payload):
        """``s`` → ``m`` with a one-entry skid buffer: ``s.ready`` is the register "empty"."""
        src, dst = self.s, self.m
        full = Signal(name=f"{name}_skid_full")
        held = {p: Signal.like(getattr(src, p), name=f"{name}_skid_{p}") for p in payload}
        m.d.comb += [
            getattr(src, ready).eq(~full),
            getattr(dst, valid).eq(full | getattr(src, valid)),
        ]
        for p in payload:
            m.d.comb += getattr(dst, p).eq(getattr(src, p))
        with m.If(full):
            for p in payload:
                m.d.comb += getattr(dst, p).eq(held[p])
            with m.If(getattr(dst, ready)):
                m.d.sync += full.eq(0)
        with m.Elif(getattr(src, valid) & ~getattr(dst, ready)):
            m.d.sync += full.eq(1)
            m.d.sync += [held[p].eq(getattr(src, p)) for p in payload]

    def _register(self, m, name, valid, ready, payload):
        """``m`` → ``s`` through one pipeline register."""
        src, dst = self.m, self.s
        full = Signal(name=f"{name}_reg_full")
        held = {p: Signal.like(getattr(src, p), name=f"{name}_reg_{p}") for p in payload}
        take = Signal(name=f"{name}_reg_take")
        m.d.comb += [
            take.eq(~full | getattr(dst, ready)),
            getattr(src, ready).eq(take),
            getattr(dst, valid).eq(full),
        ]
        m.d.comb += [getattr(dst, p).eq(held[p]) for p in payload]
        with m.If(take):
            m.d.sync += full.eq(getattr(src, valid))
            with m.If(getattr(src, valid)):
                m.d.sync += [held[p].eq(getattr(src, p)) for p in payload]
