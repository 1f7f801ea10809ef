"""UndoLogger: writes undo records of rows into the log region (docs/training.md section 5).

Ports (A = ``cfg.addr_bits``):

- ``tee_rows`` In stream ``log_row_layout(A)``: one entry per row a LOOKUP with LOG reads, in
  issue order; ``tee_lines`` In stream ``log_line_layout``: the dim/16 lines of each row, rows in
  the same order. A row's entry is taken before (at the earliest in the cycle the previous row
  finishes) its lines; lines are taken one per cycle while the write queue has room (a logged
  record costs one extra cycle for its header, so new records run at n/(n+1) lines per cycle,
  the write rate; already-logged rows drain at one line per cycle).
- ``ensure`` In stream ``log_row_layout(A)`` / ``ensure_done`` Out stream ``ensure_done_layout``,
  one answer per request, in order (UPDATE's synchronous path): row in the logged set → done
  (err 0) at once; else log full → ``LOG_FULL`` (sets ``full``); else wait until ``q_busy``
  is 0, read the row (RdCur, id 8), write its record, wait until every record write is
  acknowledged, insert the row, done (err 0, or ``MEDIA`` after a read or write error, in which
  case the row is not inserted). The tee has priority: an ensure starts only with no tee row
  pending or being logged.
- ``q_row`` Out(32) = the pending ensure's row; ``q_busy`` In(1): the UPDATE engine still has
  a write of that row to make or acknowledge for an earlier (already answered) item
  (``UpdateEngine.q_busy``). Waiting for 0 before the read makes a re-logged row's record
  (its logged-set set was full) hold the value after the earlier updates of the row in this
  UPDATE. No deadlock: only items whose ``ensure_done`` was already sent can hold ``q_busy``
  high, and they complete without the logger (see ``UpdateEngine``). Unconnected: 0 (no wait).
- ``mem`` device request port: ids 8 (row reads of ``ensure``) and 9 (record writes, full
  lines). Writes are issued in record order (data lines 1..dim/16 as they arrive, CRC computed
  on the fly, then the header line 0).
- ``batch`` In(64): the open batch; ``epoch`` In(64): the superblock's ``recovery_epoch``
  (header fields), both stable while working.
- ``retire`` In(1) pulse, only while ``idle``: clears the logged set, the next slot, ``full``
  and ``media_err``.
- ``idle`` Out(1): no input valid, no row being logged, no ensure in progress, no record with a
  write queued or unacknowledged. ``ready`` Out(1): always 1 (the set's valid bits are
  registers, cleared by reset; no init sweep). ``full`` Out(1) sticky: a row was not logged
  because the next slot was ``log_slots``; ``full_events`` Out(32): such rows since reset.
  ``media_err`` Out(1) sticky: a read or write error response. ``records`` Out(32): records
  started since retire (= next slot). ``set_overflow`` Out(32): inserts that found their set
  full, since reset.

Logged set: ``log_set_sets`` x ``log_set_ways`` (table, row) keys in a memory with an
asynchronous read port plus a register of valid bits; one lookup (and insert) per cycle, an
insert is visible to the next cycle's lookup. Hash and insert rule as docs/training.md.
Window: a record is counted in flight from its slot allocation until all its writes are
acknowledged; no slot is allocated while ``log_window`` records are in flight.
"""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..crc32 import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..encodings import LOG_HDR_FIELDS, LOG_MAGIC, LOG_SLOT_LINES, DeviceError
from ..reqport import DeviceRequestSignature, RD_CUR
from .layouts import ensure_done_layout, log_line_layout, log_row_layout

__all__ = ["UndoLogger", "ID_LOG_READ", "ID_LOG_WRITE"]

ID_LOG_READ, ID_LOG_WRITE = 8, 9
KEY_BITS = 48          # (row, table)
WQ_DEPTH = 4


class UndoLogger(wiring.Component):
    def __init__(self, cfg: DeviceConfig):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self._cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "tee_rows": In(stream.Signature(log_row_layout(ab))),
            "tee_lines": In(stream.Signature(log_line_layout)),
            "ensure": In(stream.Signature(log_row_layout(ab))),
            "ensure_done": Out(stream.Signature(ensure_done_layout)),
            "mem": Out(DeviceRequestSignature(ab)),
            "batch": In(64),
            "epoch": In(64),
            "retire": In(1),
            "idle": Out(1),
            "ready": Out(1),
            "full": Out(1),
            "full_events": Out(32),
            "media_err": Out(1),
            "records": Out(32),
            "set_overflow": Out(32),
            "q_row": Out(32),
            "q_busy": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        la = cfg.addr_bits - 6
        n_sets, n_ways = cfg.log_set_sets, cfg.log_set_ways
        s_bits = n_sets.bit_length() - 1
        base_line = cfg.log_base >> 6
        tr, en = self.tee_rows.payload, self.ensure.payload
        m.d.comb += [self.ready.eq(1), self.q_row.eq(en.row)]

        # ---- logged set ----------------------------------------------------------------------
        mem_sets = max(2, n_sets)         # (depth >= 2: no zero-width address in Verilog)
        m.submodules.set_mem = set_mem = Memory(shape=n_ways * KEY_BITS, depth=mem_sets, init=[])
        set_rd = set_mem.read_port(domain="comb")
        set_wr = set_mem.write_port(granularity=KEY_BITS)
        valid = Signal(mem_sets * n_ways)   # valid bits, way w of set i at bit i*n_ways + w
        use_ens_key = Signal()
        key_row, key_table = Signal(32), Signal(16)
        m.d.comb += [key_row.eq(Mux(use_ens_key, en.row, tr.row)),
                     key_table.eq(Mux(use_ens_key, en.table, tr.table))]
        key = Cat(key_row, key_table)
        h = Signal(range(mem_sets))
        m.d.comb += [h.eq((key_row ^ (key_row >> s_bits) ^ key_table) & (n_sets - 1)),
                     set_rd.addr.eq(h)]
        vbits = Signal(n_ways)
        m.d.comb += vbits.eq(valid.word_select(h, n_ways))
        hit = Signal()
        m.d.comb += hit.eq(Cat(vbits[w] & (set_rd.data[w * KEY_BITS:(w + 1) * KEY_BITS] == key)
                               for w in range(n_ways)).any())
        free_onehot = Signal(n_ways)      # lowest-numbered invalid way
        for w in reversed(range(n_ways)):
            with m.If(~vbits[w]):
                m.d.comb += free_onehot.eq(1 << w)
        do_insert = Signal()
        with m.If(do_insert):
            with m.If(free_onehot != 0):
                m.d.comb += [set_wr.addr.eq(h), set_wr.data.eq(Cat([key] * n_ways)),
                             set_wr.en.eq(free_onehot)]
                m.d.sync += valid.word_select(h, n_ways).eq(vbits | free_onehot)
            with m.Else():
                m.d.sync += self.set_overflow.eq(self.set_overflow + 1)

        # ---- slots, window -------------------------------------------------------------------
        next_slot = Signal(32)
        slot_line = Signal(la, init=base_line)
        at_full = next_slot == cfg.log_slots
        m.d.comb += self.records.eq(next_slot)
        inflight = Signal(range(cfg.log_window + 1))
        win_ok = inflight != cfg.log_window
        alloc = Signal()          # a record takes the next slot (its dim_log in ``alloc_dl``)
        alloc_dl = Signal(2)
        # dim_log of each record in flight, allocation order (= write order = ack order)
        m.submodules.rec_q = rec_q = fifo.SyncFIFO(width=2, depth=max(2, cfg.log_window))
        m.d.comb += [rec_q.w_en.eq(alloc), rec_q.w_data.eq(alloc_dl)]
        with m.If(alloc):
            m.d.sync += [next_slot.eq(next_slot + 1), slot_line.eq(slot_line + LOG_SLOT_LINES)]

        # ---- write queue and acknowledgements ------------------------------------------------
        m.submodules.wq = wq = fifo.SyncFIFOBuffered(width=la + 512, depth=WQ_DEPTH)
        wq_push = Signal()
        wq_addr = Signal(la)
        wq_data = Signal(512)
        wr = self.mem.wr_req
        m.d.comb += [
            wq.w_en.eq(wq_push), wq.w_data.eq(Cat(wq_addr, wq_data)),
            wr.valid.eq(wq.r_rdy), wr.payload.id.eq(ID_LOG_WRITE),
            wr.payload.addr.eq(wq.r_data[:la]), wr.payload.data.eq(wq.r_data[la:]),
            wr.payload.be.eq(-1), wq.r_en.eq(wr.ready),
            self.mem.wr_resp.ready.eq(1),
        ]
        ack_cnt = Signal(4)       # acks received of the oldest record in flight
        rec_done = Signal()
        with m.If(self.mem.wr_resp.valid):
            with m.If(ack_cnt == (Const(1, 4) << rec_q.r_data)):   # its dim/16 + 1 th write
                m.d.comb += [rec_done.eq(1), rec_q.r_en.eq(1)]
                m.d.sync += ack_cnt.eq(0)
            with m.Else():
                m.d.sync += ack_cnt.eq(ack_cnt + 1)
        m.d.sync += inflight.eq(inflight + alloc - rec_done)
        wr_err = self.mem.wr_resp.valid & self.mem.wr_resp.payload.err

        # ---- record builder context ----------------------------------------------------------
        have = Signal()           # a row is being taken (logged or drained)
        hdr = Signal()            # its data lines are done, the header is next
        c_table, c_row, c_addr, c_dl = Signal(16), Signal(32), Signal(cfg.addr_bits), Signal(2)
        c_wr = Signal()           # the row is being logged (else drained)
        c_ens = Signal()          # lines come from our own reads (ensure), else from the tee
        c_line = Signal(la)       # first line of the row's slot
        k = Signal(4)             # data lines taken
        rd_k = Signal(4)          # ensure: reads issued
        crc = Signal(32)
        n_lines = Signal(4)
        m.d.comb += n_lines.eq(Const(1, 4) << c_dl)
        resp = self.mem.rd_resp
        src_valid, src_data = Signal(), Signal(512)
        m.d.comb += [src_valid.eq(Mux(c_ens, resp.valid, self.tee_lines.valid)),
                     src_data.eq(Mux(c_ens, resp.payload.data, self.tee_lines.payload.data))]
        can_take = have & ~hdr & (~c_wr | wq.w_rdy)
        m.d.comb += [self.tee_lines.ready.eq(can_take & ~c_ens),
                     resp.ready.eq(can_take & c_ens)]
        line_fire = can_take & src_valid

        def header(crc_value):
            vals = {"magic": LOG_MAGIC, "table": c_table, "dim": (Const(16, 16) << c_dl)[:16],
                    "batch": self.batch, "row": c_row, "crc": crc_value, "addr": c_addr,
                    "epoch": self.epoch}
            line = Signal(512, name="hdr_zero" if isinstance(crc_value, int) else "hdr_line")
            for name, off, w in LOG_HDR_FIELDS:
                m.d.comb += line[8 * off:8 * (off + w)].eq(vals[name])
            return line
        hdr_zero = header(0)
        # one CRC network for data lines and the header (signals in and out: the network
        # slices its inputs bit by bit)
        crc_in, crc_nx = Signal(512), Signal(32)
        m.d.comb += [crc_in.eq(Mux(hdr, hdr_zero, src_data)),
                     crc_nx.eq(crc32_next(crc, crc_in, 64))]
        hdr_line = header(crc_nx ^ CRC32_XOROUT)

        ens_err = Signal()
        finishing = Signal()      # the current row ends this cycle (context free next cycle)
        with m.If(line_fire):
            m.d.sync += k.eq(k + 1)
            with m.If(c_wr):
                m.d.comb += [wq_push.eq(1), wq_addr.eq(c_line + 1 + k), wq_data.eq(src_data)]
                m.d.sync += crc.eq(crc_nx)
            with m.If(c_ens & resp.payload.err):
                m.d.sync += [ens_err.eq(1), self.media_err.eq(1)]
            with m.If(k == n_lines - 1):
                with m.If(c_wr):
                    m.d.sync += hdr.eq(1)
                with m.Else():
                    m.d.comb += finishing.eq(1)
        with m.If(have & hdr & wq.w_rdy):
            m.d.comb += [wq_push.eq(1), wq_addr.eq(c_line), wq_data.eq(hdr_line),
                         finishing.eq(1)]
            m.d.sync += hdr.eq(0)
        with m.If(finishing):
            m.d.sync += have.eq(0)
        with m.If(wr_err):
            m.d.sync += [ens_err.eq(1), self.media_err.eq(1)]

        # ensure: the row's own reads
        rq = self.mem.rd_req
        m.d.comb += [rq.valid.eq(have & c_ens & (rd_k != n_lines)), rq.payload.id.eq(ID_LOG_READ),
                     rq.payload.op.eq(RD_CUR), rq.payload.addr.eq(c_addr[6:] + rd_k)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += rd_k.eq(rd_k + 1)

        def start(row, *, write, ens):
            m.d.sync += [have.eq(1), hdr.eq(0), k.eq(0), rd_k.eq(0), crc.eq(CRC32_INIT),
                         c_table.eq(row.table), c_row.eq(row.row), c_addr.eq(row.addr),
                         c_dl.eq(row.dim_log), c_wr.eq(write), c_ens.eq(ens),
                         c_line.eq(slot_line)]
            if write:
                m.d.comb += [alloc.eq(1), alloc_dl.eq(row.dim_log)]

        def log_full():
            m.d.sync += [self.full.eq(1), self.full_events.eq(self.full_events + 1)]

        # ---- tee rows and the ensure path ----------------------------------------------------
        free = ~have | finishing
        ens_code = Signal(8)
        with m.FSM(name="ensure") as ens_fsm:
            with m.State("IDLE"):
                m.d.comb += self.tee_rows.ready.eq(free & (hit | at_full | win_ok))
                with m.If(self.tee_rows.valid):
                    with m.If(self.tee_rows.ready):
                        with m.If(hit):
                            start(tr, write=0, ens=0)
                        with m.Elif(at_full):
                            start(tr, write=0, ens=0)
                            log_full()
                        with m.Else():
                            start(tr, write=1, ens=0)
                            m.d.comb += do_insert.eq(1)
                with m.Elif(self.ensure.valid & ~have):
                    m.d.comb += use_ens_key.eq(1)
                    with m.If(hit):
                        m.d.sync += ens_code.eq(0)
                        m.next = "DONE"
                    with m.Elif(at_full):
                        log_full()
                        m.d.sync += ens_code.eq(DeviceError.LOG_FULL)
                        m.next = "DONE"
                    with m.Elif(win_ok & ~self.q_busy):
                        # (q_busy: the UPDATE engine still writes this row for an earlier item)
                        start(en, write=1, ens=1)
                        m.d.sync += ens_err.eq(0)
                        m.next = "WAIT"
            with m.State("WAIT"):
                # record written and every record write acknowledged (persistent)
                with m.If(~have & (inflight == 0)):
                    m.next = "INSERT"
            with m.State("INSERT"):
                m.d.comb += use_ens_key.eq(1)
                with m.If(ens_err):
                    m.d.sync += ens_code.eq(DeviceError.MEDIA)
                with m.Else():
                    m.d.comb += do_insert.eq(1)
                    m.d.sync += ens_code.eq(0)
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [self.ensure_done.valid.eq(1),
                             self.ensure_done.payload.err_code.eq(ens_code),
                             self.ensure.ready.eq(self.ensure_done.ready)]
                with m.If(self.ensure_done.ready):
                    m.next = "IDLE"

        m.d.comb += self.idle.eq(ens_fsm.ongoing("IDLE") & ~have & (inflight == 0) &
                                 (wq.level == 0) & ~self.tee_rows.valid &
                                 ~self.tee_lines.valid & ~self.ensure.valid)

        # ---- retire (only while idle) --------------------------------------------------------
        with m.If(self.retire):
            m.d.sync += [next_slot.eq(0), slot_line.eq(base_line), self.full.eq(0),
                         self.media_err.eq(0)]
            m.d.sync += valid.eq(0)
        return m
