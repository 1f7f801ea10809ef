"""UndoLogger: writes undo records of rows into the log region (docs/training.md section 5)."""
from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..crc32 import CRC32_INIT, crc32_next
from ..encodings import DeviceError
from ..reqport import DeviceRequestSignature, RD_CUR
from .layouts import ensure_done_layout, log_line_layout, log_row_layout
from .logged_set import LoggedSet
from .record_writer import RecordWriter

__all__ = ["UndoLogger", "ID_LOG_READ", "ID_LOG_WRITE"]

ID_LOG_READ, ID_LOG_WRITE = 8, 9


class UndoLogger(wiring.Component):
    """Logs rows before they change: the LOOKUP tee and UPDATE's synchronous ``ensure`` path.

    A row is logged at most once per batch (the logged set); each record takes the next log
    slot and is written by the :class:`RecordWriter` (data lines, then the header line, in slot
    order). Window: a record is counted in flight from its slot allocation until all its writes
    are acknowledged; no slot is allocated while ``log_window`` records are in flight.

    Lookup stage: a tee row or an ensure enters a one-row stage (``tee_rows``/``ensure`` taken)
    as the row in it leaves, and the :class:`LoggedSet` reads the row's set with it; the row is
    decided (hit, log full, or a new record and insert) from that registered read data in the
    next cycle or later, so a row costs one cycle of latency and rows still pass at one per
    cycle. Logged set: ``log_set_sets`` x ``log_set_ways`` (table, row) keys, an insert or
    removal seen by the decision of every later row (the set's bypass). Hash and insert rule
    as docs/training.md.

    Parameters
    ----------
    cfg : DeviceConfig
        Log region (``log_base``, ``log_slots``, ``log_window``), logged set and write buffer
        sizes (``log_set_sets``, ``log_set_ways``, ``log_buffer_lines``); A = ``cfg.addr_bits``.

    Members
    -------
    tee_rows : In(stream.Signature(log_row_layout(A)))
        One entry per row a LOOKUP with LOG reads, in issue order. A row's entry is taken into
        the lookup stage (while no ensure is in progress), at the earliest in the cycle the
        previous row is decided, which is at the earliest in the cycle the row before it
        finishes; its lines are taken from the cycle after its decision.
    tee_lines : In(stream.Signature(log_line_layout))
        The dim/16 lines of each tee row, rows in the same order, each with the ``err`` of its
        media read. A row with a failed line is still written to its slot (the slot was
        allocated with the row, before its lines), but with a CRC that cannot match (the CRC
        state after its data lines with bit 0 flipped: recovery skips the record), and the row
        is removed from the logged set in the cycle after its last line (its way, kept from its
        insert, is cleared; no row is decided in that cycle), so a later UPDATE logs it through
        ``ensure``. Lines are taken one per cycle
        while the write buffer has room, logged or not (a record's header is built in a side
        stage after its last data line and queued separately, so it costs no tee cycle). The
        write buffer holds ``cfg.log_buffer_lines`` data lines and as many headers (block RAM
        FIFOs): a run of new rows is taken at one line per cycle until the backlog (record lines
        written minus lines drained by the write port) fills it; only then does the tee wait for
        the write port (sustained: n/(n+1) lines per cycle for n-line rows at one write per
        cycle). For the buffered writes to overlap the LOOKUP rather than delay it, the gather's
        own writes (pooled outputs) must win over the logger's on a shared write port (a lower
        priority for the logger), else its last output line waits for the drain.
    ensure : In(stream.Signature(log_row_layout(A)))
        UPDATE's synchronous path, answered on ``ensure_done`` one answer per request, in
        order. A request is taken into the lookup stage (only with no tee row valid or being
        logged) and answered at the earliest in the next cycle; the next request is taken in
        the cycle an answer is. Row in the logged set: done (err 0) in the cycle after it was
        taken (one per cycle sustained); else log full: ``LOG_FULL`` (sets ``full``); else
        wait until ``q_busy`` is 0, read the row (RdCur, id 8), write its
        record, wait until every record write is acknowledged, insert the row, done (err 0, or
        ``MEDIA`` after a read or write error, in which case the row is not inserted and a
        record whose read failed carries a CRC that cannot match, as for the tee). The tee
        has priority: an ensure enters the stage only with no tee row pending or being logged,
        and holds it (tee rows wait) until answered.
    ensure_done : Out(stream.Signature(ensure_done_layout))
        The answers.
    q_row : Out(32)
        The row in the lookup stage (the pending ensure's row while an ensure is there).
    q_busy : In(1)
        The UPDATE engine still has a write of ``q_row`` to make or acknowledge for an earlier
        (already answered) item (``UpdateEngine.q_busy``). Waiting for 0 before the read makes
        a re-logged row's record (its logged-set set was full) hold the value after the earlier
        updates of the row in this UPDATE. No deadlock: only items whose ``ensure_done`` was
        already sent can hold ``q_busy`` high, and they complete without the logger (see
        ``UpdateEngine``). Unconnected: 0 (no wait).
    mem : Out(DeviceRequestSignature(A))
        Ids 8 (row reads of ``ensure``) and 9 (record writes, full lines). Writes are issued in
        record order = slot order (data lines 1..dim/16, CRC computed on the fly as they
        arrive, then the header line 0; the next record's lines only after that header).
    batch, epoch : In(64)
        The open batch and the superblock's ``recovery_epoch`` (header fields), both stable
        while working.
    retire : In(1)
        Pulse, only while ``idle``: clears the logged set, the next slot, ``full`` and
        ``media_err``.
    idle : Out(1)
        No input valid, the lookup stage empty, no row being logged, no ensure in progress, no
        record with a write queued or unacknowledged.
    ready : Out(1)
        Always 1 (the logged set is emptied by reset through its epoch; no init sweep).
    full : Out(1)
        Sticky: a row was not logged because the next slot was ``log_slots``.
    full_events : Out(32)
        Such rows since reset.
    media_err : Out(1)
        Sticky until retire: an ``ensure`` read or any record write answered an error (the
        command processor then refuses UPDATE and COMMIT of the batch with ``MEDIA``). A tee
        line's error does not set it (the LOOKUP reports its own ``MEDIA``).
    records : Out(32)
        Records started since retire (= next slot).
    set_overflow : Out(32)
        Inserts that found their set full, since reset.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """
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
        tr, en = self.tee_rows.payload, self.ensure.payload
        m.d.comb += self.ready.eq(1)

        # ---- lookup stage: the row (tee or ensure) whose logged-set answer is read ---------
        # (loaded from a waiting tee row, else an ensure; its key and set read enter the
        # logged set's stage with it, so the decision next cycle uses registered read data)
        m.submodules.logged = logged = LoggedSet(cfg.log_set_sets, cfg.log_set_ways)
        s_valid, s_ens = Signal(), Signal()
        s_row = Signal(log_row_layout(cfg.addr_bits))
        s_take = Signal()         # the stage's row is decided (or answered) and leaves it
        load_tee, load_ens = Signal(), Signal()
        do_insert = Signal()
        hit = logged.hit
        # a tee row whose read failed is removed again in the cycle after its last line
        # (``rm_pending``; the way it was inserted into is kept with the row: ``c_way``)
        rm_pending = Signal()
        rm_set, rm_way = Signal.like(logged.set_index), Signal.like(logged.free_way)
        m.d.comb += [logged.row.eq(Mux(self.tee_rows.valid, tr.row, en.row)),
                     logged.table.eq(Mux(self.tee_rows.valid, tr.table, en.table)),
                     logged.load.eq(load_tee | load_ens),
                     logged.insert.eq(do_insert), logged.remove.eq(rm_pending),
                     logged.remove_set.eq(rm_set), logged.remove_way.eq(rm_way),
                     logged.clear.eq(self.retire),
                     self.set_overflow.eq(logged.overflow),
                     self.tee_rows.ready.eq(load_tee), self.ensure.ready.eq(load_ens),
                     self.q_row.eq(s_row.row)]
        with m.If(load_tee | load_ens):
            m.d.sync += [s_valid.eq(1), s_ens.eq(load_ens),
                         s_row.eq(Mux(load_tee, tr.as_value(), en.as_value()))]
        with m.Elif(s_take):
            m.d.sync += s_valid.eq(0)

        # ---- record writer: header stage, write buffer, write port, window ------------------
        m.submodules.writer = writer = RecordWriter(cfg, write_id=ID_LOG_WRITE)
        m.d.comb += [writer.batch.eq(self.batch), writer.epoch.eq(self.epoch),
                     writer.retire.eq(self.retire)]
        wiring.connect(m, writer.wr_req, wiring.flipped(self.mem.wr_req))
        wiring.connect(m, wiring.flipped(self.mem.wr_resp), writer.wr_resp)
        next_slot = Signal(32)
        at_full = next_slot == cfg.log_slots
        m.d.comb += self.records.eq(next_slot)
        win_ok = writer.inflight != cfg.log_window
        alloc = writer.alloc      # a record takes the next slot (its dim_log in ``alloc_dl``)
        with m.If(alloc):
            m.d.sync += next_slot.eq(next_slot + 1)

        # ---- record builder context ----------------------------------------------------------
        have = Signal()           # a row is being taken (logged or drained)
        c_table, c_row, c_addr, c_dl = Signal(16), Signal(32), Signal(cfg.addr_bits), Signal(2)
        c_wr = Signal()           # the row is being logged (else drained)
        c_set, c_way = Signal.like(rm_set), Signal.like(rm_way)   # where a tee row went in
        c_ens = Signal()          # lines come from our own reads (ensure), else from the tee
        k = Signal(4)             # data lines taken
        rd_k = Signal(4)          # ensure: reads issued
        crc = Signal(32)
        n_lines = Signal(4)
        m.d.comb += n_lines.eq(Const(1, 4) << c_dl)
        resp = self.mem.rd_resp
        src_valid, src_data, src_err = Signal(), Signal(512), Signal()
        m.d.comb += [src_valid.eq(Mux(c_ens, resp.valid, self.tee_lines.valid)),
                     src_data.eq(Mux(c_ens, resp.payload.data, self.tee_lines.payload.data)),
                     src_err.eq(Mux(c_ens, resp.payload.err, self.tee_lines.payload.err))]
        # a line of the row was read with a media error: the record gets a CRC that cannot
        # match (recovery skips it), and a tee row is removed from the logged set
        c_bad = Signal()
        row_bad = Signal()
        m.d.comb += row_bad.eq(c_bad | src_err)
        last = Signal()           # k == n_lines - 1 (the row's last line), kept in a register
        # a logged line is taken only when the writer can queue it and, for the last, its header
        can_take = have & (~c_wr | (writer.lines.ready & (~last | writer.header.ready)))
        m.d.comb += [self.tee_lines.ready.eq(can_take & ~c_ens),
                     resp.ready.eq(can_take & c_ens)]
        line_fire = can_take & src_valid

        crc_nx = Signal(32)
        m.d.comb += crc_nx.eq(crc32_next(m, crc, src_data, 64))
        hdr = writer.header.payload
        m.d.comb += [writer.lines.payload.data.eq(src_data), writer.lines.payload.last.eq(last),
                     hdr.table.eq(c_table), hdr.row.eq(c_row), hdr.addr.eq(c_addr),
                     hdr.dl.eq(c_dl), hdr.crc.eq(crc_nx ^ row_bad)]

        ens_err = Signal()
        finishing = Signal()      # the current row ends this cycle (context free next cycle)
        with m.If(rm_pending):           # (before the set below: a new removal wins)
            m.d.sync += rm_pending.eq(0)
        with m.If(line_fire):
            m.d.sync += [k.eq(k + 1), last.eq(k + 2 == n_lines), c_bad.eq(row_bad)]
            with m.If(c_wr):
                m.d.comb += writer.lines.valid.eq(1)
                m.d.sync += crc.eq(crc_nx)
            with m.If(c_ens & resp.payload.err):
                m.d.sync += [ens_err.eq(1), self.media_err.eq(1)]
            with m.If(last):
                m.d.comb += [finishing.eq(1), writer.header.valid.eq(c_wr)]
                with m.If(c_wr & ~c_ens & row_bad):
                    m.d.sync += [rm_pending.eq(1), rm_set.eq(c_set), rm_way.eq(c_way)]
        with m.If(finishing):
            m.d.sync += have.eq(0)
        with m.If(writer.wr_err):
            m.d.sync += [ens_err.eq(1), self.media_err.eq(1)]

        # ensure: the row's own reads
        rq = self.mem.rd_req
        m.d.comb += [rq.valid.eq(have & c_ens & (rd_k != n_lines)), rq.payload.id.eq(ID_LOG_READ),
                     rq.payload.op.eq(RD_CUR), rq.payload.addr.eq(c_addr[6:] + rd_k)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += rd_k.eq(rd_k + 1)

        def start(row, *, write, ens):
            m.d.sync += [have.eq(1), k.eq(0), last.eq(row.dim_log == 0), rd_k.eq(0),
                         crc.eq(CRC32_INIT), c_bad.eq(0),
                         c_table.eq(row.table), c_row.eq(row.row), c_addr.eq(row.addr),
                         c_dl.eq(row.dim_log), c_wr.eq(write), c_ens.eq(ens)]
            if write:
                m.d.comb += [alloc.eq(1), writer.alloc_dl.eq(row.dim_log)]
                m.d.sync += [c_set.eq(logged.set_index), c_way.eq(logged.free_way)]

        def log_full():
            m.d.sync += [self.full.eq(1), self.full_events.eq(self.full_events + 1)]

        # ---- tee rows and the ensure path: decided on the lookup stage's row ---------------
        free = ~have | finishing
        ens_code = Signal(8)
        # a row enters the stage as the row in it leaves (IDLE or DONE; an ensure holds it in
        # WAIT and INSERT); an ensure only with no tee row waiting or being logged (the tee has
        # priority)
        room = ~s_valid | s_take
        m.d.comb += [load_tee.eq(room & self.tee_rows.valid),
                     load_ens.eq(room & ~self.tee_rows.valid & self.ensure.valid & ~have)]
        with m.FSM(name="ensure") as ens_fsm:
            with m.State("IDLE"):
                with m.If(rm_pending):
                    pass                # the logged set removes a failed row this cycle
                with m.Elif(s_valid & ~s_ens):
                    with m.If(free & (hit | at_full | win_ok)):
                        m.d.comb += s_take.eq(1)
                        with m.If(hit):
                            start(s_row, write=0, ens=0)
                        with m.Elif(at_full):
                            start(s_row, write=0, ens=0)
                            log_full()
                        with m.Else():
                            start(s_row, write=1, ens=0)
                            m.d.comb += do_insert.eq(1)
                with m.Elif(s_valid & ~have):
                    with m.If(hit):
                        # answered in this cycle; held in DONE if not taken
                        m.d.comb += [self.ensure_done.valid.eq(1),
                                     self.ensure_done.payload.err_code.eq(0),
                                     s_take.eq(self.ensure_done.ready)]
                        with m.If(~self.ensure_done.ready):
                            m.d.sync += ens_code.eq(0)
                            m.next = "DONE"
                    with m.Elif(at_full):
                        log_full()
                        m.d.sync += ens_code.eq(DeviceError.LOG_FULL)
                        m.next = "DONE"
                    with m.Elif(win_ok & ~self.q_busy):
                        # (q_busy: the UPDATE engine still writes this row for an earlier item)
                        start(s_row, write=1, ens=1)
                        m.d.sync += ens_err.eq(0)
                        m.next = "WAIT"
            with m.State("WAIT"):
                # record written and every record write acknowledged (persistent)
                with m.If(~have & (writer.inflight == 0)):
                    m.next = "INSERT"
            with m.State("INSERT"):
                with m.If(ens_err):
                    m.d.sync += ens_code.eq(DeviceError.MEDIA)
                with m.Else():
                    m.d.comb += do_insert.eq(1)
                    m.d.sync += ens_code.eq(0)
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [self.ensure_done.valid.eq(1),
                             self.ensure_done.payload.err_code.eq(ens_code),
                             s_take.eq(self.ensure_done.ready)]
                with m.If(self.ensure_done.ready):
                    m.next = "IDLE"

        m.d.comb += self.idle.eq(ens_fsm.ongoing("IDLE") & ~s_valid & ~have & ~rm_pending &
                                 (writer.inflight == 0) &
                                 writer.empty & ~self.tee_rows.valid &
                                 ~self.tee_lines.valid & ~self.ensure.valid)

        # ---- retire (only while idle) --------------------------------------------------------
        with m.If(self.retire):
            m.d.sync += [next_slot.eq(0), self.full.eq(0), self.media_err.eq(0)]
        return m
