"""AXI4 (full) interface signature for the media port, AXI4-Lite for the CSR port.

Members are flat signals named as in the AXI spec (``awaddr``, ``rdata``...), so a port named
``m_axi`` appears in Verilog as ``m_axi__awaddr`` and cocotbext-axi finds it with
``AxiBus.from_prefix(dut, "m_axi_")``. Directions are those of a master (manager).
"""
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4Signature", "AXI4LiteSignature",
           "BURST_INCR", "RESP_OKAY", "RESP_SLVERR"]

BURST_INCR = 0b01
RESP_OKAY = 0b00
RESP_SLVERR = 0b10


class AXI4Signature(wiring.Signature):
    """AXI4 master signature: ``addr_width``, ``data_width`` (bits, power of two >= 8),
    ``id_width``; ``user_width`` > 0 adds ``awuser`` (out) and ``ruser`` (in) of that width (the
    media port's per-line poison bit, docs/coherence.md). No lock/cache/prot/qos signals, no
    ARUSER/WUSER/BUSER (the slave sees them as absent/zero)."""

    def __init__(self, *, addr_width, data_width, id_width, user_width=0):
        if not isinstance(addr_width, int) or addr_width < 12:
            raise ValueError(f"addr_width must be an int >= 12, got {addr_width!r}")
        if data_width not in (8, 16, 32, 64, 128, 256, 512, 1024):
            raise ValueError(f"data_width must be a power of two 8..1024, got {data_width!r}")
        if not isinstance(id_width, int) or id_width < 1:
            raise ValueError(f"id_width must be an int >= 1, got {id_width!r}")
        if not isinstance(user_width, int) or user_width < 0:
            raise ValueError(f"user_width must be an int >= 0, got {user_width!r}")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        self.user_width = user_width
        sw = data_width // 8
        user = {"awuser": Out(user_width), "ruser": In(user_width)} if user_width else {}
        super().__init__({
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(sw), "wlast": Out(1), "wvalid": Out(1),
            "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
            **user,
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4Signature) and self.addr_width == other.addr_width and
                self.data_width == other.data_width and self.id_width == other.id_width and
                self.user_width == other.user_width)

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width}, user_width={self.user_width})")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite master signature: ``addr_width`` (bits, >= 2), ``data_width`` (32 or 64). No
    prot signals (the slave sees them as absent/zero). A slave port is
    ``In(AXI4LiteSignature(...))``; named ``axil`` it appears in Verilog as ``axil__awaddr`` and
    cocotbext-axi finds it with ``AxiLiteBus.from_prefix(dut, "axil_")``."""

    def __init__(self, *, addr_width, data_width):
        if not isinstance(addr_width, int) or addr_width < 2:
            raise ValueError(f"addr_width must be an int >= 2, got {addr_width!r}")
        if data_width not in (32, 64):
            raise ValueError(f"AXI4-Lite data_width must be 32 or 64, got {data_width!r}")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4LiteSignature) and self.addr_width == other.addr_width and
                self.data_width == other.data_width)

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"
