"""CSR register block: an AXI4-Lite slave built at elaboration from the SystemRDL register map.

No per-register code: ports and logic come from ``hw.csr.regmap.RegMap`` (default: the compiled
``hw/csr/trainingcxl.rdl``). Port names (``Field.port`` = ``<p>``, see hw/csr/regmap.py):

- storage field, hw=r/rw: ``Out(width) <p>``, the stored value. For a ``singlepulse`` field it
  is high for exactly one cycle, the one after a write of 1 is applied (when BVALID rises).
- wire field (sw=r, hw=w): ``In(width) <p>``; reads return it as sampled when AR is accepted.
- ``we``: ``In(width) <p>_next``, ``In(1) <p>_we``: the field takes ``<p>_next`` at the edge
  where ``<p>_we`` is high.
- ``hwset``: ``In(1) <p>_set``: all bits of the field set at that edge.
- ``swmod``: ``Out(1) <p>_swmod``, high (combinationally) in the cycle a software write to the
  field is applied; ``<p>`` shows the written value from the next cycle. A software write
  counts when any byte of the field has its WSTRB bit set.
- Same-cycle conflicts follow the field's RDL ``precedence``: with ``precedence = hw`` (ring
  registers, IRQ_STATUS) the hardware write or set wins over the software write of that
  cycle (``swmod`` still pulses). So hardware can veto a software write by asserting
  ``<p>_we`` with ``<p>_next = <p>`` in the ``swmod`` cycle.
- ``err_valid`` (one-cycle pulse), ``err_event_code`` (8), ``err_event_value`` (64): a write
  to a register without any software-writable field reports ``DeviceError.CSR_RO``, an access
  (read or write) to an address holding no register ``CSR_ADDR``; value = the AxADDR byte
  address. The pulse comes with the response's valid. (``err_event_*``, not ``err_*``: the
  ``ERR_CODE`` register's input port is ``err_code``.)
- ``axil``: ``In(AXI4LiteSignature(addr_width=log2(space_bytes), data_width=32))``.

Bus behaviour: AW and W are accepted independently (each held until the write is applied); the
write is applied in the first cycle both are held (``swmod`` high, new values from the next
cycle) and BVALID rises in the next cycle; a read is decoded in the cycle AR is accepted and
RVALID rises in the next cycle. One read and one write may be outstanding; they touch the
registers in different cycles: a write whose AW and W are both held goes first (ARREADY is low
in its apply cycle), an AR accepted before that reads the old values.
AxADDR bits 1:0 are ignored for decoding. Errors answer SLVERR (0b10); unmapped reads return 0;
reads of write-only and single-pulse fields return 0; writes honour WSTRB per byte; a write to a
read-only register changes nothing.
"""
from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4LiteSignature, RESP_OKAY, RESP_SLVERR
from hw.encodings import DeviceError

from .regmap import RegMap, default_regmap

__all__ = ["CsrBlock", "ERR_PORTS", "csr_offsets"]

ERR_PORTS = ("err_valid", "err_event_code", "err_event_value")


def csr_offsets(regmap: RegMap | None = None) -> dict:
    """{register name in lower case (``cmd_tail``, ``table3_rows``): byte offset}."""
    regmap = regmap if regmap is not None else default_regmap()
    return {r.name.lower(): r.offset for r in regmap.registers}


def _field_ports(f):
    """(name, member) of one field's hardware ports."""
    ports = []
    if f.kind == "wire":
        ports.append((f.port, In(f.width)))
    elif f.kind == "storage":
        if f.hw in ("r", "rw"):
            ports.append((f.port, Out(f.width)))
        if f.we:
            ports += [(f.port + "_next", In(f.width)), (f.port + "_we", In(1))]
        if f.hwset:
            ports.append((f.port + "_set", In(1)))
        if f.swmod:
            ports.append((f.port + "_swmod", Out(1)))
    return ports


class CsrBlock(wiring.Component):
    """AXI4-Lite register block of ``regmap`` (default: the project map); ports, timing and error
    behaviour in the module docstring.

    Parameters
    ----------
    regmap : RegMap, optional
        The register map (32-bit registers).

    Members
    -------
    axil : In(AXI4LiteSignature(addr_width=regmap.addr_width, data_width=32))
        The CSR bus.
    err_valid : Out(1), err_event_code : Out(8), err_event_value : Out(64)
        A bus access error event (bad address, write to a read-only register, ...).
    <field ports>
        Per field, by kind: ``<port>`` (hardware value in or storage out), ``<port>_next`` /
        ``<port>_we`` (hardware write), ``<port>_set`` (hardware set), ``<port>_swmod`` (software
        wrote the field).

    Raises
    ------
    TypeError
        If ``regmap`` is not a :class:`RegMap`.
    ValueError
        If the registers are not 32 bits wide or two fields map to one port name.
    """

    def __init__(self, regmap: RegMap | None = None):
        if regmap is None:
            regmap = default_regmap()
        if not isinstance(regmap, RegMap):
            raise TypeError(f"regmap must be a RegMap, got {regmap!r}")
        if regmap.regwidth != 32:
            raise ValueError(f"only 32-bit registers are supported, got {regmap.regwidth}")
        self._map = regmap
        members = {
            "axil": In(AXI4LiteSignature(addr_width=regmap.addr_width, data_width=32)),
            "err_valid": Out(1), "err_event_code": Out(8), "err_event_value": Out(64),
        }
        for r in regmap.registers:
            for f in r.fields:
                for name, member in _field_ports(f):
                    if name in members:
                        raise ValueError(f"port name {name!r} of {r.name}.{f.name} is already "
                                         "taken")
                    members[name] = member
        super().__init__(members)

    @property
    def regmap(self) -> RegMap:
        return self._map

    def elaborate(self, platform):
        m = Module()
        bus = self.axil
        aw = self._map.addr_width

        # ---- AXI4-Lite channels ---------------------------------------------------------------
        aw_have, aw_addr = Signal(), Signal(aw)
        w_have, w_data, w_strb = Signal(), Signal(32), Signal(4)
        bvalid, bresp = Signal(), Signal(2)
        rvalid, rresp, rdata = Signal(), Signal(2), Signal(32)
        m.d.comb += [
            bus.awready.eq(~aw_have), bus.wready.eq(~w_have),
            bus.bvalid.eq(bvalid), bus.bresp.eq(bresp),
            bus.rvalid.eq(rvalid), bus.rresp.eq(rresp), bus.rdata.eq(rdata),
        ]
        with m.If(bus.awvalid & ~aw_have):
            m.d.sync += [aw_have.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_have):
            m.d.sync += [w_have.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(bvalid & bus.bready):
            m.d.sync += bvalid.eq(0)
        with m.If(rvalid & bus.rready):
            m.d.sync += rvalid.eq(0)

        write_go = Signal()      # apply the held write this cycle
        read_go = Signal()       # AR accepted (and decoded) this cycle
        m.d.comb += [
            write_go.eq(aw_have & w_have & ~bvalid),
            bus.arready.eq(~rvalid & ~write_go),
            read_go.eq(bus.arvalid & bus.arready),
        ]
        m.d.sync += self.err_valid.eq(0)

        def error(code, addr):
            return [self.err_valid.eq(1), self.err_event_code.eq(code),
                    self.err_event_value.eq(addr)]

        with m.If(write_go):
            m.d.sync += [aw_have.eq(0), w_have.eq(0), bvalid.eq(1), bresp.eq(RESP_OKAY)]
        with m.If(read_go):
            m.d.sync += [rvalid.eq(1), rresp.eq(RESP_OKAY), rdata.eq(0)]

        # ---- fields ---------------------------------------------------------------------------
        w_word = aw_addr[2:]
        byte_mask = Cat(*(b.replicate(8) for b in w_strb))   # 32-bit mask of written bytes
        read_value = {}      # register -> 32-bit read value
        for reg in self._map.registers:
            hit = Signal(name=f"{reg.name.lower()}__wr")
            m.d.comb += hit.eq(write_go & (w_word == reg.offset >> 2))
            parts = []
            for f in reg.fields:
                sl = slice(f.lsb, f.lsb + f.width)
                if f.kind == "const":
                    value = Const(f.reset, f.width)
                elif f.kind == "wire":
                    value = getattr(self, f.port)
                else:
                    value = self._storage(m, f, hit, w_data[sl], byte_mask[sl])
                parts.append((f.lsb, value if f.sw_readable else Const(0, f.width)))
            word = Signal(32, name=f"{reg.name.lower()}__rd")
            for lsb, value in parts:
                m.d.comb += word[lsb:lsb + len(value)].eq(value)
            read_value[reg] = word

        # ---- decode ---------------------------------------------------------------------------
        with m.If(write_go):
            with m.Switch(w_word):
                for reg in self._map.registers:
                    with m.Case(reg.offset >> 2):
                        if not reg.writable:
                            m.d.sync += bresp.eq(RESP_SLVERR)
                            m.d.sync += error(DeviceError.CSR_RO, aw_addr)
                with m.Default():
                    m.d.sync += bresp.eq(RESP_SLVERR)
                    m.d.sync += error(DeviceError.CSR_ADDR, aw_addr)
        with m.If(read_go):
            with m.Switch(bus.araddr[2:]):
                for reg in self._map.registers:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += rdata.eq(read_value[reg])
                with m.Default():
                    m.d.sync += rresp.eq(RESP_SLVERR)
                    m.d.sync += error(DeviceError.CSR_ADDR, bus.araddr)
        return m

    def _storage(self, m, f, hit, wdata, wmask):
        """Flip-flop of a software-writable field; returns it (the value reads see)."""
        value = Signal(f.width, init=f.reset or 0, name=f.port + "__q")
        if f.hw in ("r", "rw"):
            m.d.comb += getattr(self, f.port).eq(value)
        sw_wr = Signal(name=f.port + "__sw_wr")
        m.d.comb += sw_wr.eq(hit & wmask.any())
        if f.swmod:
            m.d.comb += getattr(self, f.port + "_swmod").eq(sw_wr)
        if f.singlepulse:
            m.d.sync += value.eq(0)

        def software():
            with m.If(sw_wr):
                if f.onwrite == "woclr":
                    m.d.sync += value.eq(value & ~(wdata & wmask))
                else:
                    kept = 0 if f.singlepulse else value & ~wmask
                    m.d.sync += value.eq(kept | (wdata & wmask))

        def hardware():
            if f.we:
                with m.If(getattr(self, f.port + "_we")):
                    m.d.sync += value.eq(getattr(self, f.port + "_next"))
            if f.hwset:
                with m.If(getattr(self, f.port + "_set")):
                    m.d.sync += value.eq((1 << f.width) - 1)

        # in Amaranth the later assignment wins: the winner goes last
        if f.precedence == "hw":
            software()
            hardware()
        else:
            hardware()
            software()
        return value
