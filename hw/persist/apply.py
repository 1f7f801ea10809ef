"""RecordApplier: recovery pass 2, the undo records of the scan window applied newest first."""
from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..config import DeviceConfig, LINE_BYTES, SUPPORTED_DIMS
from ..counting import step
from ..crc32 import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..encodings import LOG_HDR_FIELDS
from .fields import dim_lines, field, slot_line

__all__ = ["RecordApplier"]


class RecordApplier(wiring.Component):
    """Pass 2 of recovery (docs/training.md section 6 step 3): slots ``top - 1`` down to 0.

    Header reads run ahead (up to ``ring`` headers read or waiting for their data); a header
    that passes the checks (current, dim, 64 B alignment, row inside the table region) gets its
    ``dim/16`` data lines read into a ``buf_lines`` line buffer (reserved before the reads are
    issued); the CRC (data lines, then the whole header line with bytes 20..23 zero) is checked
    one cycle after the last data line; passing records are written to ``addr`` line by line.
    (The header's share of the CRC, ``crc32_next(0, header)``, is computed when the header
    arrives and kept in the ring; CRC-32 is linear, so the check adds ``crc32_next(state, 0)``
    of the data lines to it.) Records are written strictly in descending slot order (one
    request stream, in-order responses), so for two records of one row the lower slot's
    (older) contents land last. A header or data line read with ``err`` makes its record
    invalid (not applied).

    The CRC network is the engine's (shared with the MLP slot check): the applier gives its
    state and input (``crc_st``, ``crc_in``) for the response on the bus and reads ``crc_nx``.

    Parameters
    ----------
    cfg : DeviceConfig
        Log and table regions, ``addr_bits``.
    ring : int
        Headers in flight or waiting for their data (a power of two).
    buf_lines : int
        Data line buffer (a power of two >= 8).

    Members
    -------
    start : In(1), top : In(range(log_slots + 1))
        Begin with slot ``top - 1`` (the scan's result).
    active : In(1)
        Pass 2 runs (issue reads, take responses).
    rd_load : Out(1), rd_addr : Out(addr_bits - 6), rd_kind : Out(1), rd_free : In(1)
        Read requests (kind 0 header, 1 data line) and whether the read register takes one.
    rsp_valid, rsp_kind, rsp_err : In(1); rsp_data : In(512)
        The read response on the bus (all responses are taken by the engine).
    hdr_live : In(1)
        The header on the bus is current (magic, batch C+1, epoch E).
    crc_st : Out(32), crc_in : Out(512), crc_nx : In(32)
        The shared CRC network.
    wr_load : Out(1), wr_addr : Out(addr_bits - 6), wr_room : In(1)
        Full-line row writes from the line buffer, and whether one can be loaded.
    buf_en : In(1), buf_data : Out(512)
        The line buffer's read port (the write register's).
    recovered : Out(32)
        Records applied since ``clear``.
    idle : Out(1)
        Nothing to read, no header or record pending.
    clear : In(1)
        A recovery starts.
    """

    def __init__(self, cfg: DeviceConfig, *, ring, buf_lines):
        self._cfg, self._ring, self._buf_lines = cfg, ring, buf_lines
        la = cfg.addr_bits - 6
        super().__init__({
            "start": In(1), "top": In(range(cfg.log_slots + 1)), "active": In(1),
            "rd_load": Out(1), "rd_addr": Out(la), "rd_kind": Out(1), "rd_free": In(1),
            "rsp_valid": In(1), "rsp_kind": In(1), "rsp_err": In(1), "rsp_data": In(512),
            "hdr_live": In(1),
            "crc_st": Out(32), "crc_in": Out(512), "crc_nx": In(32),
            "wr_load": Out(1), "wr_addr": Out(la), "wr_room": In(1),
            "buf_en": In(1), "buf_data": Out(512),
            "recovered": Out(32), "idle": Out(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        la_bits = cfg.addr_bits - 6
        n_slots = cfg.log_slots
        log_line = cfg.log_base // LINE_BYTES
        tbl_lo, tbl_hi = cfg.table_base, cfg.table_base + cfg.table_size
        slot_w = max(1, ceil_log2(n_slots))
        in_apply = self.active
        line = self.rsp_data
        rsp_v = self.rsp_valid
        crc_nx = self.crc_nx

        h_left = Signal(range(n_slots + 1))        # header reads to issue (next: slot h_left-1)
        hr_slot = Signal(slot_w)                   # slot of the next header response
        hdr_used = Signal(range(self._ring + 1))   # headers in flight + ring entries
        buf_free = Signal(range(self._buf_lines + 1), init=self._buf_lines)
        d_left = Signal(3)                         # data reads left in the current burst
        d_line = Signal(la_bits)
        ring_bits = 256 + 32 + slot_w              # header bytes 0..31, its CRC share, slot
        ring = m.submodules.ring = Memory(shape=ring_bits, depth=self._ring, init=[])
        ring_w = ring.write_port()
        ring_ri = ring.read_port(domain="comb")    # issuer
        ring_rd = ring.read_port(domain="comb")    # data processor
        rb = exact_log2(self._ring)
        wptr = Signal(rb + 1)                      # one wrap bit: full ring != empty ring
        iptr = Signal(rb + 1)
        dptr = Signal(rb + 1)
        m.d.comb += [ring_ri.addr.eq(iptr[:rb]), ring_rd.addr.eq(dptr[:rb])]
        buf = m.submodules.buf = Memory(shape=8 * LINE_BYTES, depth=self._buf_lines, init=[])
        buf_w = buf.write_port()
        buf_r = buf.read_port()
        bwptr = Signal(range(self._buf_lines))
        rptr = Signal(range(self._buf_lines))
        m.d.comb += [buf_w.addr.eq(bwptr), buf_w.data.eq(line), buf_r.addr.eq(rptr),
                     buf_r.en.eq(self.buf_en), self.buf_data.eq(buf_r.data)]
        dk = Signal(3)                             # data line index within the record
        crc = Signal(32)
        derr = Signal()
        chk_valid = Signal()
        chk_crc = Signal(32)
        chk_hdr = Signal(256)
        chk_g = Signal(32)
        chk_err = Signal()
        jobs = m.submodules.jobs = fifo.SyncFIFO(width=la_bits + 4 + 1, depth=self._buf_lines)
        job_active = Signal()
        j_addr = Signal(la_bits)
        j_left = Signal(4)
        m.d.sync += chk_valid.eq(0)
        hdr_inc = Signal()
        hdr_dec = Signal()
        buf_take = Signal(4)
        buf_give = Signal(4)
        step(m, hdr_used, up=hdr_inc, down=hdr_dec)
        m.d.sync += buf_free.eq(buf_free - buf_take + buf_give)

        # ---- issuer: data lines of the oldest header with room, else the next header ------
        ent_i = ring_ri.data
        n_i = dim_lines(ent_i[:256])
        with m.If(in_apply & self.rd_free):
            with m.If(d_left != 0):
                m.d.comb += [self.rd_load.eq(1), self.rd_addr.eq(d_line), self.rd_kind.eq(1)]
                m.d.sync += [d_line.eq(d_line + 1), d_left.eq(d_left - 1)]
            with m.Elif((iptr != wptr) & (buf_free >= n_i)):
                first = slot_line(log_line, ent_i[288:], la_bits)
                m.d.comb += [self.rd_load.eq(1), self.rd_addr.eq(first + 1), self.rd_kind.eq(1),
                             buf_take.eq(n_i)]
                m.d.sync += [d_line.eq(first + 2), d_left.eq(n_i - 1), iptr.eq(iptr + 1)]
            with m.Elif((h_left != 0) & (hdr_used < self._ring)):
                m.d.comb += [self.rd_load.eq(1),
                             self.rd_addr.eq(slot_line(log_line, h_left - 1, la_bits)),
                             self.rd_kind.eq(0), hdr_inc.eq(1)]
                m.d.sync += h_left.eq(h_left - 1)

        # ---- header responses: checks, then the ring (with the header's CRC share) --------
        # (the CRC network: data lines continue the record's CRC; a header line (crc bytes
        # zeroed) from state 0 gives its share, crc32_next(0, header), kept in the ring)
        is_hdr = self.rsp_kind == 0
        m.d.comb += [self.crc_in.eq(Cat(line[:160], Mux(is_hdr, 0, line[160:192]), line[192:])),
                     self.crc_st.eq(Mux(is_hdr, 0, Mux(dk == 0, CRC32_INIT, crc)))]
        h_dim = field(line, LOG_HDR_FIELDS, "dim")
        h_addr = field(line, LOG_HDR_FIELDS, "addr")
        dim_ok = 0
        for d in SUPPORTED_DIMS:
            dim_ok = dim_ok | (h_dim == d)
        end = h_addr + (h_dim << 2)
        hdr_ok = ~self.rsp_err & self.hdr_live & dim_ok & (h_addr[:6] == 0) & (end <= tbl_hi)
        if tbl_lo > 0:                           # (a compare with 0 is a lint warning)
            hdr_ok = hdr_ok & (h_addr >= tbl_lo)
        with m.If(in_apply & rsp_v & is_hdr):
            m.d.sync += hr_slot.eq(hr_slot - 1)
            with m.If(hdr_ok):
                m.d.comb += [ring_w.en.eq(1), ring_w.addr.eq(wptr[:rb]),
                             ring_w.data.eq(Cat(line[:256], crc_nx, hr_slot))]
                m.d.sync += wptr.eq(wptr + 1)
            with m.Else():
                m.d.comb += hdr_dec.eq(1)

        # ---- data responses: CRC and buffer ----------------------------------------------
        ent_d = ring_rd.data[:256]
        n_d = dim_lines(ent_d)
        err_nx = self.rsp_err | ((dk != 0) & derr)
        with m.If(in_apply & rsp_v & ~is_hdr):
            m.d.comb += buf_w.en.eq(1)
            m.d.sync += [bwptr.eq(bwptr + 1), crc.eq(crc_nx), derr.eq(err_nx)]
            with m.If(dk == n_d - 1):
                m.d.comb += hdr_dec.eq(1)
                m.d.sync += [dk.eq(0), dptr.eq(dptr + 1), chk_valid.eq(1), chk_crc.eq(crc_nx),
                             chk_hdr.eq(ent_d), chk_g.eq(ring_rd.data[256:288]),
                             chk_err.eq(err_nx)]
            with m.Else():
                m.d.sync += dk.eq(dk + 1)

        # ---- CRC check -> write job (never full: jobs <= records holding buffer lines) ----
        # crc32_next(chk_crc, header) = crc32_next(chk_crc, 0) ^ crc32_next(0, header)
        final = crc32_next(m, chk_crc, C(0, 8 * LINE_BYTES), LINE_BYTES) ^ chk_g ^ CRC32_XOROUT
        chk_ok = (final == field(chk_hdr, LOG_HDR_FIELDS, "crc")) & ~chk_err
        chk_addr = field(chk_hdr, LOG_HDR_FIELDS, "addr")[6:6 + la_bits]
        m.d.comb += [jobs.w_en.eq(chk_valid),
                     jobs.w_data.eq(Cat(chk_addr, dim_lines(chk_hdr), chk_ok))]

        # ---- writer: pop a job; valid -> write its lines in order; invalid -> free them ----
        # (a job is popped only while no job is active: a conditional pop, not a stream)
        jq_addr = jobs.r_data[:la_bits]
        jq_n = jobs.r_data[la_bits:la_bits + 4]
        jq_ok = jobs.r_data[la_bits + 4]
        with m.If(~job_active & jobs.r_rdy):
            m.d.comb += jobs.r_en.eq(1)
            with m.If(jq_ok):
                m.d.sync += [job_active.eq(1), j_addr.eq(jq_addr), j_left.eq(jq_n),
                             self.recovered.eq(self.recovered + 1)]
            with m.Else():
                m.d.comb += buf_give.eq(jq_n)
                m.d.sync += rptr.eq(rptr + jq_n)
        with m.If(job_active & self.wr_room):
            m.d.comb += [self.wr_load.eq(1), self.wr_addr.eq(j_addr), buf_give.eq(1)]
            m.d.sync += [j_addr.eq(j_addr + 1), j_left.eq(j_left - 1), rptr.eq(rptr + 1)]
            with m.If(j_left == 1):
                m.d.sync += job_active.eq(0)

        m.d.comb += self.idle.eq((h_left == 0) & (hdr_used == 0) & ~chk_valid & ~jobs.r_rdy &
                                 ~job_active)
        with m.If(self.start):
            m.d.sync += [h_left.eq(self.top), hr_slot.eq(self.top - 1), d_left.eq(0), dk.eq(0),
                         iptr.eq(wptr), dptr.eq(wptr), rptr.eq(bwptr)]
        with m.If(self.clear):
            m.d.sync += self.recovered.eq(0)
        return m
