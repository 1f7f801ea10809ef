"""RecordWriter: the undo logger's write side (record header stage, write buffer, write port,
acknowledgements and the window of records in flight)."""
from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..counting import step
from ..crc32 import CRC32_XOROUT, crc32_next
from ..encodings import LOG_HDR_FIELDS, LOG_MAGIC, LOG_SLOT_LINES
from ..reqport import wr_req_layout, wr_resp_layout
from .layouts import record_header_layout, record_line_layout

__all__ = ["RecordWriter", "record_header_line"]


def record_header_line(m, fields, crc, batch, epoch, name):
    """A 512-bit signal (driven in ``m.d.comb``) holding the header line of a record with
    ``fields`` (a ``record_header_layout`` view or dict of its fields) and ``crc``."""
    vals = {"magic": LOG_MAGIC, "table": fields["table"],
            "dim": (Const(16, 16) << fields["dl"])[:16], "batch": batch, "row": fields["row"],
            "crc": crc, "addr": fields["addr"], "epoch": epoch}
    line = Signal(512, name=name)
    for fname, off, w in LOG_HDR_FIELDS:
        m.d.comb += line[8 * off:8 * (off + w)].eq(vals[fname])
    return line


class RecordWriter(wiring.Component):
    """Writes the undo logger's records, in slot order, into the log region.

    A record is allocated (``alloc``), then its data lines arrive on ``lines`` and, after the
    last one, its header fields on ``header``. The header waits in a one-entry stage where its
    CRC is finished (the data CRC continued over the header line with its crc bytes zero), then
    joins a header queue. The write port takes a record's data lines from the data queue, then
    its header from the header queue (data lines 1..dim/16 of the slot, then line 0); addresses
    come from the writer's own slot pointer (slots are allocated and written in the same order,
    every allocated slot is written). Both queues are block-RAM FIFOs of
    ``cfg.log_buffer_lines`` entries plus their output register.

    Parameters
    ----------
    cfg : DeviceConfig
        ``log_base``, ``log_buffer_lines``, ``log_window``, ``addr_bits``.

    Members
    -------
    lines : In(stream.Signature(record_line_layout))
        Data lines of the allocated records, in order; ``last`` marks a record's last line.
    header : In(stream.Signature(record_header_layout(cfg.addr_bits)))
        One per record, after its last data line (at the earliest in the same cycle); ``crc``
        is the CRC state after the data lines. ``ready`` = the header stage is empty or drains
        this cycle.
    alloc : In(1), alloc_dl : In(2)
        A record takes the next slot; ``alloc_dl`` is its dim_log.
    batch, epoch : In(64)
        Header fields, stable while records are written.
    retire : In(1)
        Back to the first slot (only while no record is in flight).
    wr_req : Out(stream.Signature(wr_req_layout(cfg.addr_bits)))
        Full-line writes with id ``write_id``.
    wr_resp : In(stream.Signature(wr_resp_layout()))
        Always ready; acknowledgements in write order.
    inflight : Out(range(cfg.log_window + 1))
        Records allocated and not yet fully acknowledged.
    empty : Out(1)
        No data line or header queued or waiting in the header stage.
    wr_err : Out(1)
        Combinational: a write response with ``err`` this cycle.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig, *, write_id):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self._cfg, self._write_id = cfg, write_id
        ab = cfg.addr_bits
        super().__init__({
            "lines": In(stream.Signature(record_line_layout)),
            "header": In(stream.Signature(record_header_layout(ab))),
            "alloc": In(1), "alloc_dl": In(2),
            "batch": In(64), "epoch": In(64), "retire": In(1),
            "wr_req": Out(stream.Signature(wr_req_layout(ab))),
            "wr_resp": In(stream.Signature(wr_resp_layout())),
            "inflight": Out(range(cfg.log_window + 1)),
            "empty": Out(1), "wr_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        base_line = cfg.log_base >> 6
        hdr_lay = record_header_layout(cfg.addr_bits)
        buf = cfg.log_buffer_lines
        m.submodules.dq = dq = fifo.SyncFIFOBuffered(width=record_line_layout.size,
                                                     depth=buf + 1)
        m.submodules.hq = hq = fifo.SyncFIFOBuffered(width=hdr_lay.size, depth=buf + 1)
        # dim_log of each record in flight, allocation order (= write order = ack order). Block
        # RAM FIFO, written the cycle after the allocation (an entry is readable 2 cycles after
        # its write, so 3 after the allocation; a record's first write acknowledgement comes at
        # least 4 cycles after its allocation: line taken >= +1, data queue readable >= +3,
        # write >= +3, response >= +4)
        m.submodules.rec_q = rec_q = fifo.SyncFIFOBuffered(width=2,
                                                           depth=max(2, cfg.log_window) + 1)
        # (rec_q is written by a pulse and popped on a record's last acknowledgement, with no
        # ready on either side: not a stream)
        m.d.sync += [rec_q.w_en.eq(self.alloc), rec_q.w_data.eq(self.alloc_dl)]
        m.d.comb += [dq.w_stream.valid.eq(self.lines.valid),
                     dq.w_stream.payload.eq(self.lines.payload),
                     self.lines.ready.eq(dq.w_stream.ready)]

        # ---- header stage: finish the CRC over the header line, then queue it ---------------
        hp_valid = Signal()
        hp = Signal(hdr_lay, name="hp")
        hp_push = hp_valid & hq.w_rdy
        hp_zero = record_header_line(m, hp, 0, self.batch, self.epoch, "hp_zero")
        # (the CRC input goes through a mux, as the data network's, so that no constant reaches
        # the XOR reductions: with constants fed directly, the Verilator device build wrote one
        # wrong header CRC bit in some records while pysim was right; cause not isolated)
        hp_in, hcrc = Signal(512), Signal(32)
        m.d.comb += hp_in.eq(Mux(hp_valid, hp_zero, self.lines.payload.data))
        hq_in = hdr_lay(hq.w_stream.payload)
        m.d.comb += [hcrc.eq(crc32_next(m, hp.crc, hp_in, 64) ^ CRC32_XOROUT),
                     hq.w_stream.valid.eq(hp_push),
                     hq_in.table.eq(hp.table), hq_in.row.eq(hp.row), hq_in.addr.eq(hp.addr),
                     hq_in.dl.eq(hp.dl), hq_in.crc.eq(hcrc),
                     self.header.ready.eq(~hp_valid | hq.w_rdy)]
        with m.If(hp_push):
            m.d.sync += hp_valid.eq(0)
        with m.If(self.header.valid & self.header.ready):
            m.d.sync += [hp_valid.eq(1), hp.eq(self.header.payload)]
        m.d.comb += self.empty.eq((dq.level == 0) & (hq.level == 0) & ~hp_valid)

        # ---- write port: a record's data lines, then its header -----------------------------
        # (two FIFOs feed one port, selected by ``rd_hdr``: driven by hand, not by r_stream)
        rd_hdr = Signal()         # the port's next write is the header of the oldest record
        w_line = Signal(cfg.addr_bits - 6, init=base_line)   # slot of the oldest unwritten record
        w_k = Signal(4)           # its data lines written
        hq_out = hdr_lay(hq.r_data)
        dq_out = record_line_layout(dq.r_data)
        hq_line = record_header_line(m, hq_out, hq_out.crc, self.batch, self.epoch, "hq_line")
        wr = self.wr_req
        m.d.comb += [
            wr.valid.eq(Mux(rd_hdr, hq.r_rdy, dq.r_rdy)), wr.payload.id.eq(self._write_id),
            wr.payload.addr.eq(Mux(rd_hdr, w_line, w_line + 1 + w_k)),
            wr.payload.data.eq(Mux(rd_hdr, hq_line, dq_out.data)),
            wr.payload.be.eq(-1),
            dq.r_en.eq(~rd_hdr & wr.ready), hq.r_en.eq(rd_hdr & wr.ready),
            self.wr_resp.ready.eq(1),
        ]
        with m.If(wr.valid & wr.ready):
            m.d.sync += rd_hdr.eq(~rd_hdr & dq_out.last)
            with m.If(rd_hdr):
                m.d.sync += [w_line.eq(w_line + LOG_SLOT_LINES), w_k.eq(0)]
            with m.Else():
                m.d.sync += w_k.eq(w_k + 1)
        with m.If(self.retire):
            m.d.sync += w_line.eq(base_line)

        # ---- acknowledgements: a record leaves the window with its dim/16 + 1 th ------------
        ack_cnt = Signal(4)       # acks received of the oldest record in flight
        rec_done = Signal()
        with m.If(self.wr_resp.valid):
            with m.If(ack_cnt == (Const(1, 4) << rec_q.r_data)):
                m.d.comb += [rec_done.eq(1), rec_q.r_en.eq(1)]
                m.d.sync += ack_cnt.eq(0)
            with m.Else():
                m.d.sync += ack_cnt.eq(ack_cnt + 1)
        step(m, self.inflight, up=self.alloc, down=rec_done)
        m.d.comb += self.wr_err.eq(self.wr_resp.valid & self.wr_resp.payload.err)
        return m
