"""SlotChooser: at the end of a recovery, choose the MLP snapshot slot to load."""
from amaranth.hdl import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig, LINE_BYTES
from ..crc32 import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..encodings import SNAP_HDR_FIELDS, SNAP_MAGIC
from .fields import field

__all__ = ["SlotChooser"]


class SlotChooser(wiring.Component):
    """MLP slot choice (docs/training.md section 9; reads only).

    For slot A then slot B: read the header line; if ``magic == SNAP_MAGIC``, ``length`` <= the
    capacity and ``epoch`` <= C, read its ``ceil(length/64)`` payload lines (pipelined, as fast
    as the read register takes them) and check the CRC over them (bytes past ``length`` taken as
    0) then the header with its crc bytes zero (the header's share ``crc32_next(0, header)`` is
    kept, as in pass 2). The valid slot with the larger epoch wins (A on a tie). A read error
    makes that slot invalid (the engine sets ``media_err``).

    Timing: ``start`` in cycle t, the header read is loaded from t+1; ``done`` is high for one
    cycle, the cycle after the last check; ``slot``/``epoch`` are valid from then on.

    Parameters
    ----------
    cfg : DeviceConfig
        ``slots_base``, ``slots_size``, ``addr_bits``.

    Members
    -------
    start : In(1)
        Begin (only while not ``busy``).
    clear : In(1)
        ``slot``, ``epoch`` to 0 (a recovery starts).
    committed : In(64)
        C.
    rd_load : Out(1), rd_addr : Out(addr_bits - 6), rd_kind : Out(1), rd_free : In(1)
        Read requests (kind 0 header, 1 payload line) and whether one is taken.
    reads_idle : In(1)
        No read requested or in flight.
    rsp_valid, rsp_kind, rsp_err : In(1); rsp_data : In(512)
        The read response on the bus.
    crc_active : Out(1), crc_st : Out(32), crc_in : Out(512), crc_nx : In(32)
        The engine's shared CRC network (``crc_active``: use this component's inputs).
    busy : Out(1)
        Between ``start`` and ``done``.
    done : Out(1)
    slot : Out(2), epoch : Out(64)
        The choice: 0 none, 1 A, 2 B; its epoch (0 if none).
    """

    def __init__(self, cfg: DeviceConfig):
        self._cfg = cfg
        la = cfg.addr_bits - 6
        super().__init__({
            "start": In(1), "clear": In(1), "committed": In(64),
            "rd_load": Out(1), "rd_addr": Out(la), "rd_kind": Out(1), "rd_free": In(1),
            "reads_idle": In(1),
            "rsp_valid": In(1), "rsp_kind": In(1), "rsp_err": In(1), "rsp_data": In(512),
            "crc_active": Out(1), "crc_st": Out(32), "crc_in": Out(512), "crc_nx": In(32),
            "busy": Out(1), "done": Out(1), "slot": Out(2), "epoch": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        line, rsp_v, crc_nx = self.rsp_data, self.rsp_valid, self.crc_nx
        snap_cap = (cfg.slots_size // 2) // LINE_BYTES * LINE_BYTES - LINE_BYTES
        slot_lines = (cfg.slots_size // 2) // LINE_BYTES
        slots_line = cfg.slots_base // LINE_BYTES
        ms = Signal()                              # slot being checked
        ms_line = Signal(cfg.addr_bits - 6)        # its header line
        m_crc = Signal(32)                         # header: crc field
        m_g = Signal(32)                           # header: crc32_next(0, header crc-zeroed)
        m_ep = Signal(64)
        m_err = Signal()
        nd = Signal(32)                            # payload lines
        d_iss = Signal(32)
        d_rcv = Signal(32)
        ok = [Signal(name=f"mlp_ok{i}") for i in range(2)]
        ep = [Signal(64, name=f"mlp_ep{i}") for i in range(2)]
        mcrc = Signal(32)
        mrem = Signal(32)                          # payload bytes not yet received

        # the CRC input: the header with crc bytes 4..7 zero (state 0), or a payload line with
        # the bytes past ``length`` zero (state: the slot's running CRC)
        is_hdr = self.rsp_kind == 0
        m_be = Signal(LINE_BYTES)
        m.d.comb += m_be.eq(Mux(mrem >= LINE_BYTES, Const(-1, LINE_BYTES),
                                (Const(1, LINE_BYTES + 1) << mrem[:6]) - 1))
        m_mask = Cat(*[m_be[i].replicate(8) for i in range(LINE_BYTES)])
        snap_crc_off = next(off for n, off, w in SNAP_HDR_FIELDS if n == "crc")
        assert snap_crc_off == 4
        m.d.comb += [self.crc_st.eq(Mux(is_hdr, 0, mcrc)),
                     self.crc_in.eq(Mux(is_hdr, Cat(line[:32], Const(0, 32), line[64:]),
                                        line & m_mask))]
        s_len = field(line, SNAP_HDR_FIELDS, "length")
        s_ep = field(line, SNAP_HDR_FIELDS, "epoch")
        len_ok = (s_len <= snap_cap) if snap_cap < (1 << 32) - 1 else 1
        s_plausible = (~self.rsp_err & (field(line, SNAP_HDR_FIELDS, "magic") == SNAP_MAGIC) &
                       len_ok & (s_ep <= self.committed))
        m_final = crc32_next(m, mcrc, C(0, 8 * LINE_BYTES), LINE_BYTES) ^ m_g ^ CRC32_XOROUT
        with m.If(self.crc_active & rsp_v & ~is_hdr):
            m.d.sync += [mcrc.eq(crc_nx), mrem.eq(mrem - LINE_BYTES), d_rcv.eq(d_rcv + 1)]
            with m.If(self.rsp_err):
                m.d.sync += m_err.eq(1)

        with m.FSM(name="mlp_slot") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [ms.eq(0), ms_line.eq(slots_line)]
                    m.next = "HDR"
            with m.State("HDR"):
                with m.If(self.rd_free):
                    m.d.comb += [self.rd_load.eq(1), self.rd_addr.eq(ms_line),
                                 self.rd_kind.eq(0)]
                    m.next = "HDR_WAIT"
            with m.State("HDR_WAIT"):
                with m.If(rsp_v):
                    m.d.sync += [m_crc.eq(field(line, SNAP_HDR_FIELDS, "crc")), m_g.eq(crc_nx),
                                 m_ep.eq(s_ep), m_err.eq(0), mcrc.eq(CRC32_INIT),
                                 mrem.eq(s_len), nd.eq((s_len + 63) >> 6), d_iss.eq(0),
                                 d_rcv.eq(0)]
                    with m.If(s_plausible):
                        m.next = "DATA"
                    with m.Else():
                        with m.If(ms):
                            m.d.sync += ok[1].eq(0)
                        with m.Else():
                            m.d.sync += ok[0].eq(0)
                        m.next = "NEXT"
            with m.State("DATA"):
                with m.If((d_iss != nd) & self.rd_free):
                    m.d.comb += [self.rd_load.eq(1), self.rd_addr.eq(ms_line + 1 + d_iss),
                                 self.rd_kind.eq(1)]
                    m.d.sync += d_iss.eq(d_iss + 1)
                with m.If((d_rcv == nd) & self.reads_idle):
                    m.next = "CHK"
            with m.State("CHK"):
                good = (m_final == m_crc) & ~m_err
                with m.If(ms):
                    m.d.sync += [ok[1].eq(good), ep[1].eq(m_ep)]
                with m.Else():
                    m.d.sync += [ok[0].eq(good), ep[0].eq(m_ep)]
                m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(~ms):
                    m.d.sync += [ms.eq(1), ms_line.eq(slots_line + slot_lines)]
                    m.next = "HDR"
                with m.Else():
                    with m.If(ok[1] & (~ok[0] | (ep[1] > ep[0]))):
                        m.d.sync += [self.slot.eq(2), self.epoch.eq(ep[1])]
                    with m.Elif(ok[0]):
                        m.d.sync += [self.slot.eq(1), self.epoch.eq(ep[0])]
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
        m.d.comb += [self.busy.eq(~fsm.ongoing("IDLE")),
                     self.crc_active.eq(fsm.ongoing("HDR") | fsm.ongoing("HDR_WAIT") |
                                        fsm.ongoing("DATA"))]
        with m.If(self.clear):
            m.d.sync += [self.slot.eq(0), self.epoch.eq(0)]
        return m
