"""CSR access for cocotb benches, by register name, from the generated register map.

No SystemRDL here: the map is the JSON that ``python -m hw.csr.gen`` writes from the RDL, read
through the one loader ``hw.csr.regmap.regmap_document``.

    csr = CsrMaster(dut, prefix="axil", clock=dut.clk, reset=dut.rst)
    await csr.write("LR", 1 << 24)
    busy = await csr.read_field("STATUS", "BUSY")
    await csr.write_fields("IRQ_ENABLE", CPL=1, ERR=1)
    await csr.expect_error_write(0x00C, 0)       # unmapped: SLVERR

``CsrMaster`` wraps cocotbext-axi's ``AxiLiteMaster`` on the ports ``<prefix>__awaddr``...
(an Amaranth port named ``<prefix>``); ``cosim.csr_cpp.CppCsrMaster`` is the same interface on
the master compiled into the simulator. Both are :class:`CsrAccess`: every named access checks
the response: a non-OKAY response raises :class:`CsrResponseError` (pass ``check=False`` to get
it back instead).
"""
from __future__ import annotations

import json
from pathlib import Path

from hw.csr.regmap import regmap_document

__all__ = ["CsrAccess", "CsrMap", "CsrMaster", "CsrResponseError", "OKAY", "SLVERR"]

OKAY, SLVERR = 0b00, 0b10


class CsrResponseError(AssertionError):
    """An AXI4-Lite access answered other than expected (SLVERR where OKAY was expected, or
    the reverse)."""


class CsrMap:
    """The register map: ``offset(name)``, ``register(name)`` (the JSON entry), field helpers.
    Register names as in the RDL with array indices appended (``TABLE3_ROWS``)."""

    def __init__(self, path=None):
        """``path``: a regmap.json to read instead of the project's."""
        doc = regmap_document() if path is None else json.loads(Path(path).read_text())
        self.name = doc["name"]
        self.space_bytes = doc["space_bytes"]
        self.registers = {r["name"]: r for r in doc["registers"]}
        self.by_offset = {r["offset"]: r for r in doc["registers"]}

    def register(self, name: str) -> dict:
        try:
            return self.registers[name]
        except KeyError:
            raise KeyError(f"no register {name!r} in {self.name}") from None

    def offset(self, name: str) -> int:
        return self.register(name)["offset"]

    def name_at(self, offset: int) -> str | None:
        r = self.by_offset.get(offset & ~3)
        return r["name"] if r else None

    def field(self, reg: str, field: str) -> dict:
        for f in self.register(reg)["fields"]:
            if f["name"] == field:
                return f
        names = ", ".join(f["name"] for f in self.register(reg)["fields"])
        raise KeyError(f"register {reg} has no field {field!r} (fields: {names})")

    def get_field(self, reg: str, field: str, value: int) -> int:
        f = self.field(reg, field)
        return (value >> f["lsb"]) & ((1 << f["width"]) - 1)

    def fields(self, reg: str, value: int) -> dict:
        """{field name: value} of a register value."""
        return {f["name"]: self.get_field(reg, f["name"], value)
                for f in self.register(reg)["fields"]}

    def pack(self, reg: str, **fields) -> int:
        """Register value with the given fields, every other field 0."""
        value = 0
        for name, v in fields.items():
            f = self.field(reg, name)
            v = int(v)
            if not 0 <= v < (1 << f["width"]):
                raise ValueError(f"{reg}.{name} = {v} does not fit {f['width']} bits")
            value |= v << f["lsb"]
        return value

    def writable(self, reg: str) -> bool:
        return "w" in self.register(reg)["sw"]


class CsrAccess:
    """CSR access by register name on top of a transport's ``raw_read(addr) -> (data, resp)``
    and ``raw_write(addr, value, strb) -> resp`` (:class:`CsrMaster`,
    ``cosim.csr_cpp.CppCsrMaster``)."""

    def __init__(self, regmap: CsrMap | None = None):
        self.map = regmap if regmap is not None else CsrMap()

    async def raw_read(self, addr: int) -> tuple[int, int]:
        raise NotImplementedError

    async def raw_write(self, addr: int, value: int, strb: int = 0xF) -> int:
        raise NotImplementedError

    @staticmethod
    def _check_strb(strb: int) -> tuple[int, int]:
        """(first byte, byte count) of the byte enables ``strb`` (non-empty, contiguous)."""
        if strb == 0 or strb > 0xF:
            raise ValueError(f"strb must be a non-empty 4-bit mask, got {strb:#x}")
        first = (strb & -strb).bit_length() - 1
        n = strb.bit_length() - first
        if strb != ((1 << n) - 1) << first:
            raise ValueError(f"strb {strb:#06b} is not contiguous")
        return first, n

    async def expect_error_write(self, addr: int, value: int = 0) -> None:
        """Write expecting SLVERR (read-only or unmapped); raises CsrResponseError otherwise."""
        resp = await self.raw_write(addr, value)
        if resp != SLVERR:
            raise CsrResponseError(f"write {value:#x} to {self._where(addr)}: expected SLVERR, "
                                   f"got resp {resp:#04b}")

    async def expect_error_read(self, addr: int) -> int:
        """Read expecting SLVERR (unmapped); returns the data; raises CsrResponseError
        otherwise."""
        data, resp = await self.raw_read(addr)
        if resp != SLVERR:
            raise CsrResponseError(f"read of {self._where(addr)}: expected SLVERR, got resp "
                                   f"{resp:#04b} data {data:#x}")
        return data

    # ---- by name ------------------------------------------------------------------------------
    async def read(self, name: str, *, check: bool = True):
        """Value of register ``name`` (``(value, resp)`` with ``check=False``)."""
        data, resp = await self.raw_read(self.map.offset(name))
        if not check:
            return data, resp
        if resp != OKAY:
            raise CsrResponseError(f"read of {name} ({self.map.offset(name):#05x}) answered "
                                   f"resp {resp:#04b} (SLVERR = {SLVERR:#04b})")
        return data

    async def write(self, name: str, value: int, *, strb: int = 0xF, check: bool = True):
        """Write register ``name``; returns the response (raises on non-OKAY with ``check``)."""
        resp = await self.raw_write(self.map.offset(name), value, strb)
        if check and resp != OKAY:
            raise CsrResponseError(f"write {value:#x} to {name} ({self.map.offset(name):#05x}) "
                                   f"answered resp {resp:#04b} (SLVERR = {SLVERR:#04b})")
        return resp

    async def read_field(self, name: str, field: str) -> int:
        return self.map.get_field(name, field, await self.read(name))

    async def read_fields(self, name: str) -> dict:
        return self.map.fields(name, await self.read(name))

    async def write_fields(self, name: str, **fields) -> None:
        """Write the given fields, every other field of the register 0 (no read: safe for
        write-1-to-clear and single-pulse fields)."""
        await self.write(name, self.map.pack(name, **fields))

    async def modify_fields(self, name: str, **fields) -> None:
        """Read-modify-write: the given fields change, the others keep the value read."""
        value = await self.read(name)
        for fname in fields:
            f = self.map.field(name, fname)
            value &= ~(((1 << f["width"]) - 1) << f["lsb"])
        await self.write(name, value | self.map.pack(name, **fields))

    async def write64(self, name: str, value: int) -> None:
        """Write a 64-bit quantity split into ``<name>_LO`` then ``<name>_HI``."""
        await self.write(name + "_LO", value & 0xFFFF_FFFF)
        await self.write(name + "_HI", (value >> 32) & 0xFFFF_FFFF)

    async def read64(self, name: str) -> int:
        """``<name>_LO`` | ``<name>_HI`` << 32 (two reads, low word first)."""
        lo = await self.read(name + "_LO")
        return lo | (await self.read(name + "_HI")) << 32

    def _where(self, addr: int) -> str:
        name = self.map.name_at(addr)
        return f"{addr:#05x}" + (f" ({name})" if name else " (unmapped)")


class CsrMaster(CsrAccess):
    """CSR access by name over AXI4-Lite (cocotbext-axi ``AxiLiteMaster``). On a top that can
    also carry the compiled master (:mod:`cosim.csr_cpp.wrapper`: a ``csr_cpp`` input) it drives
    that top's ``ext_<prefix>__<signal>`` inputs, with ``csr_cpp`` low."""

    def __init__(self, dut, prefix="axil", clock=None, reset=None, regmap: CsrMap | None = None):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster
        from cosim.csr_cpp.wrapper import SELECT_PORT
        from cosim.model_top import redirect_bus, require_cocotb_clock
        require_cocotb_clock(dut, "the Python CSR master (cosim.csr, cocotbext-axi)")
        super().__init__(regmap)
        clock = clock if clock is not None else dut.clk
        # Amaranth names the port members <prefix>__awaddr; cocotbext joins prefix + "_" + name
        bus = AxiLiteBus.from_prefix(dut, prefix + "_")
        redirect_bus(dut, SELECT_PORT, (bus.write.aw, bus.write.w, bus.write.b, bus.read.ar,
                                        bus.read.r))
        self.axil = AxiLiteMaster(bus, clock, reset)

    async def raw_read(self, addr: int) -> tuple[int, int]:
        """(data, resp) of a 32-bit read at byte address ``addr``."""
        r = await self.axil.read(addr, 4)
        return int.from_bytes(r.data, "little"), int(r.resp)

    async def raw_write(self, addr: int, value: int, strb: int = 0xF) -> int:
        """Write ``value`` at ``addr`` with byte enables ``strb`` (contiguous bytes only: the
        AxiLiteMaster derives WSTRB from address and length); returns the response."""
        first, n = self._check_strb(strb)
        data = (int(value) & 0xFFFF_FFFF).to_bytes(4, "little")[first:first + n]
        r = await self.axil.write((addr & ~3) + first, data)
        return int(r.resp)
