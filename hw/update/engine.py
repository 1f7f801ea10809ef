"""UpdateEngine: the UPDATE engine (in-place SGD update of embedding rows, docs/training.md 4)."""
from amaranth.hdl import Cat, Module, ResetInserter, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..config import DeviceConfig
from ..counting import step
from ..encodings import DeviceError
from ..gather.engine import register_slice
from ..gather.front import BagFront
from ..port_mux import RequestPortMux
from ..cmd_checks import command_checks
from ..reqport import DeviceRequestSignature
from .delta import DeltaRing
from .fork import ItemFork
from .grads import GradReader
from .layouts import (ensure_done_layout, ensure_layout, update_cmd_layout, update_cpl_layout,
                      upd_item_layout)
from .row_reader import RowReader
from .row_writer import RowWriter, row_line_layout

__all__ = ["UpdateEngine", "ID_OFFSETS", "ID_INDICES", "ID_GRADS", "ID_ROWS"]

ID_OFFSETS, ID_INDICES, ID_GRADS, ID_ROWS = 4, 5, 6, 7


class UpdateEngine(wiring.Component):
    """Applies one UPDATE command: ``row = clamp(row - delta)`` for every (bag, row) item.

    Semantics and check order: docs/training.md 4 (checks as docs/lookup.md with
    ``grads_addr`` in place of ``out_addr``). ``delta = round_half_even(lr * grad /
    2^frac_bits)`` per bag and lane, ``row = clamp(row - delta)`` to int32, ``sat`` counts
    clamped lanes per update.

    Pipeline: :class:`~hw.gather.front.BagFront` (offsets reader -> walker -> bag FIFO ->
    sequencer) -> slice -> :class:`ItemFork` (``ensure`` requests; item FIFO) ->
    :class:`GradReader` (a bag's first item reads its dim/16 gradient lines into the
    :class:`DeltaRing` of ``max(16, max_reads/2)`` delta lines; multiply, round) -> item FIFO
    -> :class:`RowReader` (unless ``nolog``, waits for the item's ``ensure_done``; same-row
    hazard check; one RdOwn line read per cycle; line context FIFO, ``max_reads`` lines in
    flight; responses land in a line buffer of the same depth, so ``rd_resp`` is never
    back-pressured) -> :class:`RowWriter` (W0 joins context, row line, delta line,
    ``ensure_done``; W1 subtracts, clamps, counts; write FIFO; full-line writes).

    Same-row hazards: a tracker of the rows in flight (:class:`~hw.update.rows.RowTracker`:
    ``cfg.upd_rows`` entries of (row, lines issued, lines acknowledged) in ``cfg.upd_ways`` ways,
    indexed by an XOR fold of the row, plus ``cfg.upd_victims`` in an exact CAM for rows whose
    set is full; a row is held by one entry at most). An item waits one cycle in the row
    stage's holding register while its row is looked up (pipelined: one item per cycle); before
    its first line:

    - no match: it allocates a free entry (count = lines per row) and reads its lines (RdOwn);
    - match (the row's previous update is still in flight): it joins that entry (count +=
      lines per row) and reads nothing: its line k is forwarded from line k of the row's
      previous item (a ring of the last ``n_fwd`` result lines by write sequence number,
      ``n_fwd`` = the power of two >= ``max_reads + max_writes + 32``, which covers the most
      lines written between the two; a per-entry table holds the ring slot of the entry's last
      line 0). So no row is read while a write to it is unacknowledged, and updates of one row
      apply in item order;
    - no free way in its set, no free victim and no match: the item waits (``stalls`` counts
      these cycles). Capacity: at most ``upd_rows + upd_victims`` distinct rows between first
      read and last write acknowledgement, fewer when rows crowd one set; at dim 16 the write
      port stays busy only while the rows in flight cover the round trip in line times (read
      latency + pipeline + write latency), at dim d while ``rows * d / 16`` >= it.

    The entry index travels with each line (context FIFO, W0/W1, write FIFO, then a FIFO of
    entry indices in write order, matched to the in-order write acknowledgements); each
    acknowledgement counts in its entry, which frees when both counts agree. The tracker is
    cleared whenever a command drains (after a stop, lines read but discarded are never
    acknowledged; the table is then swept, ``upd_rows / upd_ways`` cycles, before the next
    command's first row).

    Errors and partial failure:

    - command-level checks: nothing is read or written, ``err_bag`` 0;
    - per-bag checks and INDEX_RANGE (from the sequencer): every item before the failing one
      is applied, ``err_bag`` = the failing bag;
    - ``ensure_done.err_code != 0`` for item i: items before i are applied, nothing from i on;
      ``err_code`` = that code, ``err_bag`` = i's bag, ``err_value`` = ``log_slots`` for
      LOG_FULL, else 0;
    - a media error (any read response or write response with ``err``): no line is written
      after it is seen (a row line read with ``err`` is never written); MEDIA, ``err_bag`` 0,
      ``err_value`` 0. (A row may then be partly written; the batch is rolled back by
      recovery.) The first of these stop conditions in time wins; a stop wins over a sequencer
      error.

    Completion only after every read returned, every write was acknowledged and every
    ``ensure`` was answered: nothing of a command is in flight after ``cpl``.

    Parameters
    ----------
    cfg : DeviceConfig
        Address width, staging region, ``max_reads``, ``max_writes``, ``max_bag``,
        ``frac_bits``, ``upd_rows``, ``log_slots``.

    Members
    -------
    cmd : In(stream.Signature(update_cmd_layout(A)))
        One UPDATE; accepted only in IDLE (after the previous completion was taken).
    cpl : Out(stream.Signature(update_cpl_layout()))
        One completion per command.
    mem : Out(DeviceRequestSignature(A))
        Ids 4 offsets, 5 indices, 6 gradients (RdCur), 7 rows (RdOwn reads, full-line writes).
    ensure : Out(stream.Signature(ensure_layout(A)))
        Unless ``nolog``, one per row item in item order. Ensures run ahead of the row stage
        (an already-logged row costs nothing), but an item enters the row stage (reads its
        lines or joins the row tracker) only after its own ``ensure_done`` has been received,
        so no line of an item is read or written before it. Every ``ensure`` sent is answered
        before ``cpl``, even after an error.
    ensure_done : In(stream.Signature(ensure_done_layout))
        The logger's answers, in request order.
    q_row : In(32), q_busy : Out(1)
        The undo logger's query (combinational): ``q_busy`` = some item whose ``ensure_done``
        has been received has not yet finished with ``q_row``, i.e. a valid row tracker entry
        holds ``q_row`` (its writes are not all acknowledged), or some answered item has not
        yet entered the row stage (conservatively busy for every row). Always 0 once the
        command has stopped (no further writes are started; tracker entries of discarded
        lines are never acknowledged). The logger waits for ``q_busy`` = 0 before reading a
        row it must (re-)log, so the record holds the row's value after every earlier update
        of this command (docs/training.md 5, a row re-logged because its logged-set set is
        full). No deadlock: every item counted in ``q_busy`` has its ``ensure_done`` already,
        and the logger is working on a later ensure; such items need nothing more from the
        logger (their gradient lines were requested before them, the row stage, W0 and the
        writes depend only on earlier items, which are answered too), so they enter the row
        stage, their writes are acknowledged and ``q_busy`` falls. Items after the one being
        ensured cannot enter the row stage (their answers come later), so they cannot keep
        ``q_busy`` high.
    busy : Out(1)
        A command is being executed.

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
            "cmd": In(stream.Signature(update_cmd_layout(ab))),
            "cpl": Out(stream.Signature(update_cpl_layout())),
            "mem": Out(DeviceRequestSignature(ab)),
            "ensure": Out(stream.Signature(ensure_layout(ab))),
            "ensure_done": In(stream.Signature(ensure_done_layout)),
            "busy": Out(1),
            "q_row": In(32),
            "q_busy": Out(1),
        })

    @property
    def delta_lines(self):
        """Lines of the delta ring (gradient lines of bags with rows in flight)."""
        return max(16, self._cfg.max_reads // 2)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ab = cfg.addr_bits
        resp_depth = cfg.max_reads            # row lines read and not yet taken by W0
        done_depth = cfg.max_reads + 32       # ensures sent and not yet used by W0
        # forwarding ring: the last n_fwd result lines, by write sequence number (see docstring)
        n_fwd = 1 << ceil_log2(resp_depth + cfg.max_writes + 32)
        clear = Signal()      # command accepted: resets per-command blocks
        stop = Signal()       # no more writes (ensure error or media error)
        bk_reset = Signal()   # free every row tracker entry (a command drained)

        # ---- blocks ------------------------------------------------------------------------
        m.submodules.mux = mux = RequestPortMux(
            ab, [(ID_OFFSETS,), (ID_INDICES,), (ID_GRADS,), (ID_ROWS,)])
        m.submodules.front = front = BagFront(
            ab, staging_end=cfg.staging_base + cfg.staging_size, max_bag=cfg.max_bag,
            max_reads=cfg.max_reads, offsets_id=ID_OFFSETS, indices_id=ID_INDICES)
        m.submodules.fork = fork = ItemFork(ab, max_ensures=done_depth)
        m.submodules.it_q = it_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=upd_item_layout.size, depth=8))
        m.submodules.grads = grads = GradReader(ab, ring_lines=self.delta_lines, rd_id=ID_GRADS)
        m.submodules.deltas = deltas = DeltaRing(self.delta_lines, frac_bits=cfg.frac_bits)
        m.submodules.g_q = g_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=upd_item_layout.size, depth=16))
        victims = cfg.upd_victims
        m.submodules.rows = rows = RowReader(
            ab, entries=cfg.upd_rows, ways=cfg.upd_ways, victims=victims,
            count_bits=(n_fwd + 8).bit_length(),
            max_lines=resp_depth, max_answers=done_depth, rd_id=ID_ROWS)
        m.submodules.ctx_q = ctx_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=rows.ctx.payload.shape().size, depth=resp_depth))
        m.submodules.resp_q = resp_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=row_line_layout.size, depth=resp_depth))
        m.submodules.done_q = done_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=8, depth=done_depth))
        m.submodules.writer = writer = RowWriter(
            ab, entries=cfg.upd_rows + victims, fwd_lines=n_fwd, ring_lines=self.delta_lines,
            max_writes=cfg.max_writes, log_slots=cfg.log_slots, wr_id=ID_ROWS)

        wiring.connect(m, wiring.flipped(self.mem), mux.mem)
        wiring.connect(m, front.off_mem, mux.req_0)
        wiring.connect(m, front.idx_mem, mux.req_1)
        grad_port, row_port = mux.req_2, mux.req_3

        # ---- command registers and command-level checks -----------------------------------
        c = Signal(update_cmd_layout(ab))
        dim_log = Signal(2)
        need_log = ~c.nolog
        chk_err, chk_val, dl, off_end, chk_ready = command_checks(m, cfg, c, c.grads_addr, clear,
                                                                  err_width=8)
        m.d.comb += [front.n_bags.eq(c.n_bags), front.table_rows.eq(c.table_rows),
                     front.offsets_addr.eq(c.offsets_addr), front.offsets_limit.eq(off_end),
                     front.indices_addr.eq(c.indices_addr), front.clear.eq(clear)]
        for blk in (fork, grads, rows, writer):
            m.d.comb += blk.stop.eq(stop)
        for blk in (fork, grads, deltas, rows, writer):
            m.d.comb += blk.clear.eq(clear)
        m.d.comb += [
            fork.need_log.eq(need_log), fork.table_id.eq(c.table_id),
            fork.table_base.eq(c.table_base), fork.row_dl.eq(dl), fork.dim_log.eq(dim_log),
            grads.grads_line.eq(c.grads_addr[6:]), grads.dim_log.eq(dim_log),
            deltas.lr.eq(c.lr),
            rows.table_line.eq(c.table_base[6:]), rows.dim_log.eq(dim_log),
            rows.need_log.eq(need_log), rows.free_rows.eq(bk_reset),
            writer.table_line.eq(c.table_base[6:]), writer.dim_log.eq(dim_log),
            writer.need_log.eq(need_log),
        ]

        # ---- front -> (items tagged with their bag) slice -> fork -> items ------------------
        seq_out = stream.Signature(upd_item_layout).create(path=("seq_out",))
        si = front.items.payload
        m.d.comb += [
            seq_out.valid.eq(front.items.valid),
            seq_out.payload.index.eq(si.index), seq_out.payload.first.eq(si.first),
            seq_out.payload.last.eq(si.last), seq_out.payload.empty.eq(si.empty),
            seq_out.payload.bag.eq(front.bag),
            front.items.ready.eq(seq_out.ready),
        ]
        s_slice = register_slice(m, "s_slice", seq_out, fork.items, reset=clear)
        ens_slice = register_slice(m, "ens_slice", fork.ensure, self.ensure)
        wiring.connect(m, fork.out, it_q.w_stream)

        # ensure_done: always room (the fork bounds the answers due)
        wiring.connect(m, wiring.flipped(self.ensure_done), done_q.w_stream)
        ens_out = Signal(range(done_depth + 1))   # ensures sent, not yet answered
        ens_sent = self.ensure.valid & self.ensure.ready
        ens_answered = self.ensure_done.valid & self.ensure_done.ready
        step(m, ens_out, up=ens_sent, down=ens_answered)

        # ---- grad stage -> delta ring; row stage -> row reads -> write stage ---------------
        wiring.connect(m, it_q.r_stream, grads.items)
        g_slice = register_slice(m, "g_slice", grads.rd_req, grad_port.rd_req)
        wiring.connect(m, grads.out, g_q.w_stream)
        wiring.connect(m, grad_port.rd_resp, deltas.resp)
        grad_pend = Signal(range(self.delta_lines + 1))
        step(m, grad_pend, up=grads.issue, down=deltas.written)
        wiring.connect(m, g_q.r_stream, rows.items)
        h_slice = register_slice(m, "h_slice", rows.rd_req, row_port.rd_req)
        wiring.connect(m, rows.ctx, ctx_q.w_stream)
        # row responses always have room in the line buffer (the row stage's credit), so
        # rd_resp is always ready: resp_q is written by hand, not through w_stream
        rresp = row_port.rd_resp
        m.d.comb += [rresp.ready.eq(1), resp_q.w_en.eq(rresp.valid),
                     resp_q.w_data.eq(Cat(rresp.payload.data, rresp.payload.err))]
        m.d.comb += [rows.answered.eq(ens_answered), rows.q_row.eq(self.q_row),
                     self.q_busy.eq(rows.q_busy)]
        wiring.connect(m, ctx_q.r_stream, writer.ctx)
        wiring.connect(m, resp_q.r_stream, writer.lines)
        wiring.connect(m, done_q.r_stream, writer.answers)
        wiring.connect(m, writer.wr_req, row_port.wr_req)
        wiring.connect(m, row_port.wr_resp, writer.wr_resp)
        m.d.comb += [
            fork.used.eq(writer.used), rows.released.eq(writer.released),
            rows.dec.eq(writer.dec), rows.dec_idx.eq(writer.dec_idx),
            grads.freed.eq(writer.freed), writer.filled.eq(deltas.filled),
            deltas.rd_addr.eq(writer.delta_addr), deltas.rd_en.eq(writer.delta_en),
            writer.delta.eq(deltas.rd_data),
        ]

        # ---- stop: the write stage's own errors, else a media error ------------------------
        stop_code, stop_bag, stop_value = Signal(8), Signal(32), Signal(64)
        with m.If(writer.fail.valid):
            m.d.sync += [stop.eq(1), stop_code.eq(writer.fail.code),
                         stop_bag.eq(writer.fail.bag), stop_value.eq(writer.fail.value)]
        idx_started = Signal()
        with m.If(front.idx_start):
            m.d.sync += idx_started.eq(1)
        running = Signal()        # RUN or DRAIN (the readers' media flags belong to this command)
        media_any = running & (front.off_media_err | (idx_started & front.idx_media_err) |
                               deltas.err | writer.err)
        with m.If(media_any & ~stop & ~writer.fail.valid):
            m.d.sync += [stop.eq(1), stop_code.eq(DeviceError.MEDIA), stop_bag.eq(0),
                         stop_value.eq(0)]

        # ---- control -----------------------------------------------------------------------
        err_code, err_value, err_bag, cycles = Signal(8), Signal(64), Signal(32), Signal(32)
        drained = (front.idle & ~front.items.valid & (s_slice.level == 0) &
                   (it_q.level == 0) & (g_slice.level == 0) & (g_q.level == 0) &
                   (h_slice.level == 0) & (grad_pend == 0) & ~deltas.busy &
                   ~rows.holding & (rows.held == 0) & ~writer.busy &
                   (ens_slice.level == 0) & (ens_out == 0))
        cpl = self.cpl.payload
        m.d.comb += [
            cpl.err_code.eq(err_code), cpl.err_bag.eq(err_bag), cpl.err_value.eq(err_value),
            cpl.rows.eq(writer.rows), cpl.sat.eq(writer.sat), cpl.lines.eq(writer.lines_written),
            cpl.stalls.eq(rows.stalls), cpl.cycles.eq(cycles),
        ]

        with m.FSM(name="ctrl"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.comb += clear.eq(1)
                    m.d.sync += [c.eq(self.cmd.payload), cycles.eq(1), err_code.eq(0),
                                 err_value.eq(0), err_bag.eq(0), stop.eq(0),
                                 idx_started.eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [dim_log.eq(dl), cycles.eq(cycles + 1)]
                with m.If(chk_ready):       # the checks are this command's
                    with m.If(chk_err != 0):
                        m.d.sync += [err_code.eq(chk_err), err_value.eq(chk_val)]
                        m.next = "CPL"
                    with m.Else():
                        m.d.comb += front.start.eq(1)
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(stop | front.err | front.done):
                    m.d.comb += front.flush.eq(1)
                    with m.If(front.err):
                        m.d.sync += [err_code.eq(front.err_code), err_value.eq(front.err_value),
                                     err_bag.eq(front.bag)]
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                m.d.sync += cycles.eq(cycles + 1)
                # (a media flag raised now sets ``stop`` next cycle: wait for it)
                with m.If(drained & ~(media_any & ~stop)):
                    m.d.comb += bk_reset.eq(1)
                    with m.If(stop):
                        m.d.sync += [err_code.eq(stop_code), err_value.eq(stop_value),
                                     err_bag.eq(stop_bag)]
                    m.next = "CPL"
            with m.State("CPL"):
                m.d.comb += [self.busy.eq(1), self.cpl.valid.eq(1)]
                with m.If(self.cpl.ready):
                    m.next = "IDLE"
        return m
