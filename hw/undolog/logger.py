"""UndoLogger: writes undo records of rows into the log region (docs/training.md section 5).

Ports (A = ``cfg.addr_bits``):

- ``tee_rows`` In stream ``log_row_layout(A)``: one entry per row a LOOKUP with LOG reads, in
  issue order; ``tee_lines`` In stream ``log_line_layout``: the dim/16 lines of each row, rows in
  the same order. A row's entry is taken before (at the earliest in the cycle the previous row
  finishes) its lines; lines are taken one per cycle while the write buffer has room, logged
  or not (a record's header is built in a side stage after its last data line and queued
  separately, so it costs no tee cycle). The write buffer holds ``cfg.log_buffer_lines`` data
  lines and as many headers (block RAM FIFOs): a run of new rows is taken at one line per
  cycle until the backlog (record lines written minus lines drained by the write port) fills
  it; only then does the tee wait for the write port (sustained: n/(n+1) lines per cycle for
  n-line rows at one write per cycle). For the buffered writes to overlap the LOOKUP rather than
  delay it, the gather's own writes (pooled outputs) must win over the logger's on a shared
  write port (a lower priority for the logger), else its last output line waits for the drain.
- ``ensure`` In stream ``log_row_layout(A)`` / ``ensure_done`` Out stream ``ensure_done_layout``,
  one answer per request, in order (UPDATE's synchronous path): row in the logged set → done
  (err 0) in the cycle the request is seen (``ensure`` taken with the answer; one per cycle
  sustained); else log full → ``LOG_FULL`` (sets ``full``); else wait until ``q_busy``
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
  lines). Writes are issued in record order = slot order (data lines 1..dim/16, CRC computed
  on the fly as they arrive, then the header line 0; the next record's lines only after that
  header); the write port keeps its own slot pointer (every allocated slot is written).
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
        at_full = next_slot == cfg.log_slots
        m.d.comb += self.records.eq(next_slot)
        inflight = Signal(range(cfg.log_window + 1))
        win_ok = inflight != cfg.log_window
        alloc = Signal()          # a record takes the next slot (its dim_log in ``alloc_dl``)
        alloc_dl = Signal(2)
        # dim_log of each record in flight, allocation order (= write order = ack order). Block
        # RAM FIFO (an entry is readable 2 cycles after its write; a record's first write
        # acknowledgement comes at least 4 cycles after its allocation: line taken >= +1, data
        # queue readable >= +3, write >= +3, response >= +4)
        m.submodules.rec_q = rec_q = fifo.SyncFIFOBuffered(width=2,
                                                           depth=max(2, cfg.log_window) + 1)
        m.d.comb += [rec_q.w_en.eq(alloc), rec_q.w_data.eq(alloc_dl)]
        with m.If(alloc):
            m.d.sync += next_slot.eq(next_slot + 1)

        # ---- write queues and acknowledgements ----------------------------------------------
        # dq: data lines (data, last line of the record); hq: header fields of records whose
        # data lines are all in dq (or written). The port takes a record's data lines from dq,
        # then its header from hq (record order = slot order); addresses come from the port's
        # own slot pointer ``w_line`` (slots are allocated and written in the same order, every
        # allocated slot is written). Both FIFOs: sync-read memories of log_buffer_lines
        # entries (block RAM) plus the output register.
        hq_fields = [("table", 16), ("row", 32), ("addr", cfg.addr_bits), ("dl", 2),
                     ("crc", 32)]
        hq_w = sum(w for _, w in hq_fields)
        buf = cfg.log_buffer_lines
        m.submodules.dq = dq = fifo.SyncFIFOBuffered(width=512 + 1, depth=buf + 1)
        m.submodules.hq = hq = fifo.SyncFIFOBuffered(width=hq_w, depth=buf + 1)
        wq_push = Signal()
        wq_data = Signal(512)
        wq_last = Signal()
        m.d.comb += [dq.w_en.eq(wq_push), dq.w_data.eq(Cat(wq_data, wq_last))]

        def unpack(bits, fields):
            out, off = {}, 0
            for name, w in fields:
                out[name] = bits[off:off + w]
                off += w
            return out

        def header(f, crc_value, name):
            vals = {"magic": LOG_MAGIC, "table": f["table"],
                    "dim": (Const(16, 16) << f["dl"])[:16], "batch": self.batch, "row": f["row"],
                    "crc": crc_value, "addr": f["addr"], "epoch": self.epoch}
            line = Signal(512, name=name)
            for fname, off, w in LOG_HDR_FIELDS:
                m.d.comb += line[8 * off:8 * (off + w)].eq(vals[fname])
            return line
        rd_hdr = Signal()         # the port's next write is the header of the oldest record
        w_line = Signal(la, init=base_line)   # slot (header line) of the oldest unwritten record
        w_k = Signal(4)           # its data lines written
        hq_out = unpack(hq.r_data, hq_fields)
        hq_line = header(hq_out, hq_out["crc"], "hq_line")
        wr = self.mem.wr_req
        m.d.comb += [
            wr.valid.eq(Mux(rd_hdr, hq.r_rdy, dq.r_rdy)), wr.payload.id.eq(ID_LOG_WRITE),
            wr.payload.addr.eq(Mux(rd_hdr, w_line, w_line + 1 + w_k)),
            wr.payload.data.eq(Mux(rd_hdr, hq_line, dq.r_data[:512])),
            wr.payload.be.eq(-1),
            dq.r_en.eq(~rd_hdr & wr.ready), hq.r_en.eq(rd_hdr & wr.ready),
            self.mem.wr_resp.ready.eq(1),
        ]
        with m.If(wr.valid & wr.ready):
            m.d.sync += rd_hdr.eq(~rd_hdr & dq.r_data[512])
            with m.If(rd_hdr):
                m.d.sync += [w_line.eq(w_line + LOG_SLOT_LINES), w_k.eq(0)]
            with m.Else():
                m.d.sync += w_k.eq(w_k + 1)
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
        c_table, c_row, c_addr, c_dl = Signal(16), Signal(32), Signal(cfg.addr_bits), Signal(2)
        c_wr = Signal()           # the row is being logged (else drained)
        c_ens = Signal()          # lines come from our own reads (ensure), else from the tee
        k = Signal(4)             # data lines taken
        rd_k = Signal(4)          # ensure: reads issued
        crc = Signal(32)
        n_lines = Signal(4)
        m.d.comb += n_lines.eq(Const(1, 4) << c_dl)
        resp = self.mem.rd_resp
        src_valid, src_data = Signal(), Signal(512)
        m.d.comb += [src_valid.eq(Mux(c_ens, resp.valid, self.tee_lines.valid)),
                     src_data.eq(Mux(c_ens, resp.payload.data, self.tee_lines.payload.data))]
        last = Signal()
        m.d.comb += last.eq(k == n_lines - 1)
        # header stage: fields and data CRC of the last record whose data lines are all queued
        hp_valid = Signal()
        hp = {name: Signal(w, name=f"hp_{name}") for name, w in hq_fields}
        hp_push = hp_valid & hq.w_rdy
        can_take = have & (~c_wr | (dq.w_rdy & (~last | ~hp_valid | hq.w_rdy)))
        m.d.comb += [self.tee_lines.ready.eq(can_take & ~c_ens),
                     resp.ready.eq(can_take & c_ens)]
        line_fire = can_take & src_valid

        crc_nx = Signal(32)
        m.d.comb += crc_nx.eq(crc32_next(crc, src_data, 64))
        # the header's CRC: a second network, over the header line with its crc bytes zero
        # (its input goes through a mux, as the data network's, so that no constant reaches the
        # XOR reductions: with constants fed directly, the Verilator device build wrote one wrong
        # header CRC bit in some records while pysim was right; cause not isolated)
        hp_zero = header(hp, 0, "hp_zero")
        hp_in, hcrc = Signal(512), Signal(32)
        m.d.comb += hp_in.eq(Mux(hp_valid, hp_zero, src_data))
        m.d.comb += [hcrc.eq(crc32_next(hp["crc"], hp_in, 64) ^ CRC32_XOROUT),
                     hq.w_en.eq(hp_push),
                     hq.w_data.eq(Cat(*[hcrc if n == "crc" else hp[n] for n, _ in hq_fields]))]
        with m.If(hp_push):
            m.d.sync += hp_valid.eq(0)

        ens_err = Signal()
        finishing = Signal()      # the current row ends this cycle (context free next cycle)
        with m.If(line_fire):
            m.d.sync += k.eq(k + 1)
            with m.If(c_wr):
                m.d.comb += [wq_push.eq(1), wq_data.eq(src_data), wq_last.eq(last)]
                m.d.sync += crc.eq(crc_nx)
            with m.If(c_ens & resp.payload.err):
                m.d.sync += [ens_err.eq(1), self.media_err.eq(1)]
            with m.If(last):
                m.d.comb += finishing.eq(1)
                with m.If(c_wr):
                    m.d.sync += [hp_valid.eq(1), hp["table"].eq(c_table), hp["row"].eq(c_row),
                                 hp["addr"].eq(c_addr), hp["dl"].eq(c_dl),
                                 hp["crc"].eq(crc_nx)]
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
            m.d.sync += [have.eq(1), k.eq(0), rd_k.eq(0), crc.eq(CRC32_INIT),
                         c_table.eq(row.table), c_row.eq(row.row), c_addr.eq(row.addr),
                         c_dl.eq(row.dim_log), c_wr.eq(write), c_ens.eq(ens)]
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
                        # answered in this cycle; held in DONE if not taken
                        m.d.comb += [self.ensure_done.valid.eq(1),
                                     self.ensure_done.payload.err_code.eq(0),
                                     self.ensure.ready.eq(self.ensure_done.ready)]
                        with m.If(~self.ensure_done.ready):
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
                                 (dq.level == 0) & (hq.level == 0) & ~hp_valid &
                                 ~self.tee_rows.valid & ~self.tee_lines.valid &
                                 ~self.ensure.valid)

        # ---- retire (only while idle) --------------------------------------------------------
        with m.If(self.retire):
            m.d.sync += [next_slot.eq(0), w_line.eq(base_line), self.full.eq(0),
                         self.media_err.eq(0)]
            m.d.sync += valid.eq(0)
        return m
