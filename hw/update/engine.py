"""UpdateEngine: the UPDATE engine (in-place SGD update of embedding rows, docs/training.md 4).

Ports:

- ``cmd`` (in, ``update_cmd_layout``): one UPDATE; accepted only in IDLE (after the previous
  completion was taken).
- ``cpl`` (out, ``update_cpl_layout``): one completion per command.
- ``mem`` (device request port): ids 4 offsets, 5 indices, 6 gradients (RdCur), 7 rows (RdOwn
  reads, full-line writes).
- ``ensure`` (out, ``ensure_layout``) / ``ensure_done`` (in, ``err_code`` 8): unless ``nolog``,
  one ``ensure`` per row item in item order; the logger answers in request order. Ensures run
  ahead of the row stage (an already-logged row costs nothing), but an item enters the row stage
  (reads its lines or joins the row tracker) only after its own ``ensure_done`` has been
  received, so no line of an item is read or written before it. Every ``ensure`` sent is
  answered before ``cpl``, even after an error.
- ``q_row`` (in 32) / ``q_busy`` (out 1): the undo logger's query (combinational): ``q_busy``
  = some item whose ``ensure_done`` has been received has not yet finished with ``q_row``, i.e.
  a valid row tracker entry holds ``q_row`` (its writes are not all acknowledged), or some
  answered item has not yet entered the row stage (conservatively busy for every row). Always 0
  once the command has stopped (no further writes are started; tracker entries of discarded
  lines are never acknowledged). The logger waits for ``q_busy`` = 0 before reading a row it
  must (re-)log, so the record holds the row's value after every earlier update of this
  command (docs/training.md 5, a row re-logged because its logged-set set is full).
  No deadlock: every item counted in ``q_busy`` has its ``ensure_done`` already, and the
  logger is working on a later ensure; such items need nothing more from the logger (their
  gradient lines were requested before them, the row stage, W0 and the writes depend only on
  earlier items, which are answered too), so they enter the row stage, their writes are
  acknowledged and ``q_busy`` falls. Items after the one being ensured cannot enter the row
  stage (their answers come later), so they cannot keep ``q_busy`` high.
- ``busy`` (out): a command is being executed.

Semantics and check order: docs/training.md 4 (checks as docs/lookup.md with ``grads_addr`` in
place of ``out_addr``). ``delta = round_half_even(lr * grad / 2^frac_bits)`` per bag and lane,
``row = clamp(row - delta)`` to int32, ``sat`` counts clamped lanes per update.

Errors and partial failure:

- command-level checks: nothing is read or written, ``err_bag`` 0;
- per-bag checks and INDEX_RANGE (from the sequencer): every item before the failing one is
  applied, ``err_bag`` = the failing bag;
- ``ensure_done.err_code != 0`` for item i: items before i are applied, nothing from i on;
  ``err_code`` = that code, ``err_bag`` = i's bag, ``err_value`` = ``log_slots`` for LOG_FULL,
  else 0;
- a media error (any read response or write response with ``err``): no line is written after
  it is seen (a row line read with ``err`` is never written); MEDIA, ``err_bag`` 0,
  ``err_value`` 0. (A row may then be partly written; the batch is rolled back by recovery.)
  The first of these stop conditions in time wins; a stop wins over a sequencer error.

Completion only after every read returned, every write was acknowledged and every ``ensure`` was
answered: nothing of a command is in flight after ``cpl``.

Pipeline: offsets reader -> walker -> bag FIFO -> sequencer (+ bag number) -> slice -> fork
(ensure requests; item FIFO) -> grad stage (a bag's first item reads its dim/16 gradient lines
into a ring of delta lines, ``max(16, max_reads/2)`` lines) -> item FIFO -> row stage (unless
``nolog``, waits for the item's ``ensure_done``; same-row
hazard check, below; one RdOwn line read per cycle; line context FIFO, ``max_reads`` lines
in flight; responses land in a line buffer of the same depth, so ``rd_resp`` is never
back-pressured) -> write stage W0 (joins
context, row line, delta line, ``ensure_done``) -> W1 (subtract, clamp, count) -> write FIFO ->
full-line writes. Gradient responses go through a two-stage delta pipeline (multiply, round)
into the ring.

Same-row hazards: an exact tracker of the rows in flight (``RowTracker``, ``cfg.upd_rows``
entries of (row, count of its lines issued and not yet write-acknowledged)). Before its first
line an item checks its row against every valid entry (a CAM; no false sharing):

- no match: it allocates a free entry (count = lines per row) and reads its lines (RdOwn);
- match (the row's previous update is still in flight): it joins that entry (count += lines
  per row) and reads nothing: its line k is forwarded from line k of the row's previous item
  (a ring of the last ``n_fwd`` result lines by write sequence number, ``n_fwd`` = the power
  of two >= ``max_reads + max_writes + 32``, which covers the most lines written between the
  two; a per-entry table holds the ring slot of the entry's last line 0). So no row is read
  while a write to it is unacknowledged, and updates of one row apply in item order;
- no free entry and no match: the item waits (``stalls`` counts these cycles). Capacity: at
  most ``upd_rows`` distinct rows between first read and last write acknowledgement; at dim
  16 the write port stays busy only while ``upd_rows`` >= the round trip in line times (read
  latency + pipeline + write latency), at dim d while ``upd_rows * d / 16`` >= it.

The entry index travels with each line (context FIFO, W0/W1, write FIFO, then a FIFO of entry
indices in write order, matched to the in-order write acknowledgements); each acknowledgement
decrements its entry, which frees at 0. The tracker is cleared whenever a command drains
(after a stop, lines read but discarded are never acknowledged).
"""
from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, signed
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..config import DeviceConfig
from ..encodings import DeviceError
from ..gather.engine import register_slice
from ..gather.layouts import bag_layout
from ..gather.sequencer import BagSequencer
from ..gather.walker import OffsetsWalker
from ..port_mux import RequestPortMux
from ..cmd_checks import command_checks
from ..reqport import DeviceRequestSignature, RD_CUR, RD_OWN, rd_req_layout
from ..word_reader import WordReader
from .layouts import (DELTA_BITS, ensure_done_layout, ensure_layout, line_ctx_layout,
                      update_cmd_layout, update_cpl_layout, upd_item_layout)
from .rows import RowTracker

__all__ = ["UpdateEngine", "ID_OFFSETS", "ID_INDICES", "ID_GRADS", "ID_ROWS"]

ID_OFFSETS, ID_INDICES, ID_GRADS, ID_ROWS = 4, 5, 6, 7
LANES = 16


class UpdateEngine(wiring.Component):
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
        la = ab - 6
        f = cfg.frac_bits
        s_end = cfg.staging_base + cfg.staging_size
        reader_depth = max(4, cfg.max_reads // 8)
        resp_depth = cfg.max_reads            # row lines read and not yet taken by W0
        n_delta = self.delta_lines            # power of two
        dpb = ceil_log2(n_delta)
        done_depth = cfg.max_reads + 32       # ensures sent and not yet used by W0
        clear = Signal()      # command accepted: resets per-command blocks
        stop = Signal()       # no more writes (ensure error or media error)
        bk_reset = Signal()   # free every row tracker entry (a command drained)

        # ---- blocks ------------------------------------------------------------------------
        eb = max(1, ceil_log2(cfg.upd_rows))     # row tracker entry index
        ctx_lay = line_ctx_layout(eb)
        m.submodules.mux = mux = RequestPortMux(
            ab, [(ID_OFFSETS,), (ID_INDICES,), (ID_GRADS,), (ID_ROWS,)])
        m.submodules.off_rd = off_rd = WordReader(ab, rd_id=ID_OFFSETS, depth=reader_depth)
        m.submodules.idx_rd = idx_rd = WordReader(ab, rd_id=ID_INDICES, depth=reader_depth)
        m.submodules.walker = walker = ResetInserter(clear)(
            OffsetsWalker(ab, staging_end=s_end, max_bag=cfg.max_bag))
        m.submodules.bag_q = bag_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=bag_layout.size, depth=2 * cfg.max_reads))
        m.submodules.seq = seq = ResetInserter(clear)(BagSequencer())
        m.submodules.it_q = it_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=upd_item_layout.size, depth=8))
        m.submodules.g_q = g_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=upd_item_layout.size, depth=16))
        m.submodules.ctx_q = ctx_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=ctx_lay.size, depth=resp_depth))
        m.submodules.resp_q = resp_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=512 + 1, depth=resp_depth))
        m.submodules.done_q = done_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=8, depth=done_depth))
        wr_q_w = la + eb + 512
        m.submodules.wr_q = wr_q = fifo.SyncFIFOBuffered(width=wr_q_w, depth=4)
        # first-word-fall-through: a write response may come the cycle after its request
        m.submodules.wk_q = wk_q = fifo.SyncFIFO(width=eb, depth=cfg.max_writes)
        # forwarding ring: the last n_fwd result lines, by write sequence number (see docstring)
        n_fwd = 1 << ceil_log2(resp_depth + cfg.max_writes + 32)
        fb = ceil_log2(n_fwd)
        m.submodules.rows_t = rt = ResetInserter(bk_reset)(RowTracker(
            cfg.upd_rows, count_bits=(n_fwd + 8).bit_length()))
        m.submodules.fring = fring = Memory(shape=512, depth=n_fwd, init=[])
        f_wr = fring.write_port()
        f_rd = fring.read_port(domain="sync", transparent_for=(f_wr,))
        m.submodules.wseq = wseq = Memory(shape=fb, depth=cfg.upd_rows, init=[])
        ws_wr = wseq.write_port()
        ws_rd = wseq.read_port(domain="comb")
        m.submodules.dmem = dmem = Memory(shape=LANES * DELTA_BITS, depth=n_delta, init=[])
        d_wr = dmem.write_port()
        d_rd = dmem.read_port(domain="sync")

        wiring.connect(m, wiring.flipped(self.mem), mux.mem)
        wiring.connect(m, off_rd.mem, mux.req_0)
        wiring.connect(m, idx_rd.mem, mux.req_1)
        grad_port, row_port = mux.req_2, mux.req_3

        # ---- command registers and command-level checks -----------------------------------
        c = Signal(update_cmd_layout(ab))
        dim_log = Signal(2)
        n_lines = Signal(4)                  # 1 << dim_log
        m.d.comb += n_lines.eq(1 << dim_log)
        table_line = c.table_base[6:]
        grads_line = c.grads_addr[6:]
        m.d.comb += [
            walker.n_bags.eq(c.n_bags), walker.indices_addr.eq(c.indices_addr),
            seq.table_rows.eq(c.table_rows), seq.n_bags.eq(c.n_bags),
            seq.marker_value.eq(walker.err_value),
            off_rd.start_addr.eq(c.offsets_addr),
            idx_rd.start.eq(walker.idx_start),
            idx_rd.start_addr.eq(walker.idx_start_addr),
            idx_rd.limit.eq(walker.idx_limit),
        ]
        wiring.connect(m, off_rd.words, walker.offsets)
        wiring.connect(m, walker.bags, bag_q.w_stream)
        wiring.connect(m, bag_q.r_stream, seq.bags)
        wiring.connect(m, idx_rd.words, seq.indices)

        chk_err, chk_val, dl, off_end = command_checks(m, cfg, c, c.grads_addr, err_width=8)
        m.d.comb += off_rd.limit.eq(off_end)    # the offsets reader's limit
        row_shift = dl + 6

        # ---- sequencer -> slice (items tagged with their bag) -> fork -------------------------
        seq_out = stream.Signature(upd_item_layout).create(path=("seq_out",))
        fk = stream.Signature(upd_item_layout).create(path=("fork_in",))
        si = seq.items.payload
        m.d.comb += [
            seq_out.valid.eq(seq.items.valid),
            seq_out.payload.index.eq(si.index), seq_out.payload.first.eq(si.first),
            seq_out.payload.last.eq(si.last), seq_out.payload.empty.eq(si.empty),
            seq_out.payload.bag.eq(seq.bag),
            seq.items.ready.eq(seq_out.ready),
        ]
        s_slice = register_slice(m, "s_slice", seq_out, fk, reset=clear)

        ens_in = stream.Signature(ensure_layout(ab)).create(path=("ens_in",))
        ens_slice = register_slice(m, "ens_slice", ens_in, self.ensure)
        ens_cnt = Signal(range(done_depth + 1))   # ensures pushed, done not yet used by W0
        ens_out = Signal(range(done_depth + 1))   # ensures sent, not yet answered
        need_log = ~c.nolog
        fi = fk.payload
        ens_room = ens_cnt < done_depth
        m.d.comb += [
            ens_in.payload.table.eq(c.table_id), ens_in.payload.row.eq(fi.index),
            ens_in.payload.addr.eq(c.table_base + (fi.index << row_shift.as_unsigned())),
            ens_in.payload.dim_log.eq(dim_log),
            it_q.w_data.eq(fi),
        ]
        with m.If(stop | fi.empty):
            m.d.comb += fk.ready.eq(1)           # dropped (empty bags need no work)
        with m.Else():
            ok = it_q.w_rdy & (~need_log | (ens_in.ready & ens_room))
            m.d.comb += [
                fk.ready.eq(ok),
                it_q.w_en.eq(fk.valid & ok),
                ens_in.valid.eq(fk.valid & need_log & it_q.w_rdy & ens_room),
            ]
        ens_pushed = ens_in.valid & ens_in.ready

        # ensure_done: always room (ens_cnt bounds the answers due)
        m.d.comb += [
            done_q.w_data.eq(self.ensure_done.payload.err_code),
            done_q.w_en.eq(self.ensure_done.valid),
            self.ensure_done.ready.eq(done_q.w_rdy),
        ]
        ens_sent = self.ensure.valid & self.ensure.ready
        ens_answered = self.ensure_done.valid & self.ensure_done.ready
        m.d.sync += ens_out.eq(ens_out + ens_sent - ens_answered)

        # ---- grad stage: a bag's first item reads the bag's gradient lines -----------------
        ga = Signal(dpb + 1)      # delta lines allocated (ring pointer, mod 2*n_delta)
        gf = Signal(dpb + 1)      # delta lines filled
        wb = Signal(dpb + 1)      # first delta line of the bag at the write stage (freed below)
        grad_pend = Signal(range(n_delta + 1))
        kg = Signal(3)
        gi = upd_item_layout(it_q.r_data)
        g_rd = stream.Signature(rd_req_layout(ab)).create(path=("g_rd",))
        g_slice = register_slice(m, "g_slice", g_rd, grad_port.rd_req)
        g_last = kg == n_lines - 1
        space = (ga - wb)[:dpb + 1] < n_delta
        m.d.comb += [
            g_rd.payload.id.eq(ID_GRADS), g_rd.payload.op.eq(RD_CUR),
            g_rd.payload.addr.eq(grads_line + (gi.bag << dim_log) + kg),
            g_q.w_data.eq(it_q.r_data),
        ]
        g_issue = Signal()
        with m.If(stop):
            m.d.comb += it_q.r_en.eq(1)
            m.d.sync += kg.eq(0)
        with m.Elif(it_q.r_rdy & gi.first):
            m.d.comb += [g_rd.valid.eq(space & (~g_last | g_q.w_rdy)),
                         g_issue.eq(g_rd.valid & g_rd.ready)]
            with m.If(g_issue):
                with m.If(g_last):
                    m.d.sync += kg.eq(0)
                    m.d.comb += [g_q.w_en.eq(1), it_q.r_en.eq(1)]
                with m.Else():
                    m.d.sync += kg.eq(kg + 1)
        with m.Elif(it_q.r_rdy):
            m.d.comb += [g_q.w_en.eq(1), it_q.r_en.eq(g_q.w_rdy)]
        with m.If(g_issue):
            m.d.sync += ga.eq(ga + 1)

        # ---- delta pipeline: gradient line -> products -> rounded, saturated deltas -------
        gresp = grad_port.rd_resp
        grad_err = Signal()
        d0_v = Signal()
        d0_data = Signal(512)
        d1_v = Signal()
        m.d.comb += gresp.ready.eq(1)
        m.d.sync += [d0_v.eq(gresp.valid), d0_data.eq(gresp.payload.data), d1_v.eq(d0_v)]
        with m.If(gresp.valid & gresp.payload.err):
            m.d.sync += grad_err.eq(1)
        deltas = []
        lr = c.lr
        for i in range(LANES):
            g = d0_data[i * 32:(i + 1) * 32].as_signed()
            p = Signal(signed(65), name=f"prod{i}")
            m.d.sync += p.eq(lr * g)
            if f == 0:
                d = p
            else:
                q = p >> f                       # floor (arithmetic shift)
                r = p.as_unsigned()[:f]
                half = 1 << (f - 1)
                up = (r > half) | ((r == half) & q[0])
                d = Signal(signed(66), name=f"delta{i}")
                m.d.comb += d.eq(q + up)
            lim = 1 << 32
            ds = Mux(d > lim, lim, Mux(d < -lim, -lim, d))
            deltas.append(ds[:DELTA_BITS])
        m.d.comb += [d_wr.addr.eq(gf[:dpb]), d_wr.data.eq(Cat(*deltas)), d_wr.en.eq(d1_v)]
        m.d.sync += [gf.eq(gf + d1_v), grad_pend.eq(grad_pend + g_issue - d1_v)]

        # ---- row stage: hazard check, one RdOwn line read per cycle ------------------------
        k = Signal(3)
        hi = upd_item_layout(g_q.r_data)
        h_rd = stream.Signature(rd_req_layout(ab)).create(path=("h_rd",))
        h_slice = register_slice(m, "h_slice", h_rd, row_port.rd_req)
        row_held = Signal(range(resp_depth + 1))   # lines read, not yet taken by W0
        credit = row_held < resp_depth
        h_last = k == n_lines - 1
        cur_ent = Signal(eb)                  # tracker entry of the item (lines k > 0)
        cur_fwd = Signal()                    # the item is a repeat (lines k > 0)
        first = k == 0
        blocked = first & ~rt.hit & rt.full
        # ensure_done received, item not yet entered (see ``q_busy``)
        ens_ahead = Signal(range(done_depth + 1))
        ens_wait = first & need_log & (ens_ahead == 0)
        enter = Signal()                      # an item enters the row stage (its first line)
        fwd_now = Mux(first, rt.hit, cur_fwd)
        ent_now = Mux(first, Mux(rt.hit, rt.hit_idx, rt.free_idx), cur_ent)
        stalls = Signal(32)
        ctx_in = ctx_lay(ctx_q.w_data)
        m.d.comb += [
            rt.q_row.eq(hi.index), rt.alloc_row.eq(hi.index), rt.alloc_count.eq(n_lines),
            ctx_in.ent.eq(ent_now), ctx_in.fwd.eq(fwd_now),
            h_rd.payload.id.eq(ID_ROWS), h_rd.payload.op.eq(RD_OWN),
            h_rd.payload.addr.eq(table_line + (hi.index << dim_log) + k),
            ctx_in.row.eq(hi.index), ctx_in.k.eq(k), ctx_in.bag_last.eq(hi.last),
            ctx_in.bag.eq(hi.bag),
        ]
        h_issue = Signal()
        with m.If(stop):
            m.d.comb += g_q.r_en.eq(1)
            m.d.sync += k.eq(0)
        with m.Elif(g_q.r_rdy):
            can = ~blocked & ~ens_wait & credit & ctx_q.w_rdy
            m.d.comb += [h_rd.valid.eq(can & ~fwd_now),
                         h_issue.eq(can & (fwd_now | h_rd.ready))]
            with m.If(blocked):
                m.d.sync += stalls.eq(stalls + 1)
            with m.If(h_issue):
                m.d.comb += [ctx_q.w_en.eq(1), rt.alloc.eq(first & ~rt.hit),
                             rt.join.eq(first & rt.hit)]
                with m.If(first):
                    m.d.comb += enter.eq(1)
                    m.d.sync += [cur_ent.eq(ent_now), cur_fwd.eq(rt.hit)]
                with m.If(h_last):
                    m.d.sync += k.eq(0)
                    m.d.comb += g_q.r_en.eq(1)
                with m.Else():
                    m.d.sync += k.eq(k + 1)

        m.d.sync += ens_ahead.eq(ens_ahead + ens_answered - (enter & need_log))
        m.d.comb += [rt.q2_row.eq(self.q_row),
                     self.q_busy.eq(~stop & (rt.q2_hit | (ens_ahead != 0)))]

        # row responses always have room in the line buffer (credit)
        rresp = row_port.rd_resp
        m.d.comb += [rresp.ready.eq(1), resp_q.w_en.eq(rresp.valid),
                     resp_q.w_data.eq(Cat(rresp.payload.data, rresp.payload.err))]

        # ---- write stage W0: join context, row line, delta line and ensure_done ------------
        ctx = ctx_lay(ctx_q.r_data)
        r_data = resp_q.r_data[:512]
        r_err = ~ctx.fwd & resp_q.r_data[512]
        both = ctx_q.r_rdy & (ctx.fwd | resp_q.r_rdy)
        need_ens = need_log & (ctx.k == 0)
        ens_bad = need_ens & done_q.r_rdy & (done_q.r_data != 0)
        filled = (gf - wb)[:dpb + 1] >= n_lines
        w1_v = Signal()
        w1_push = Signal()
        w0_fire = Signal()
        w0_pop = Signal()
        rows = Signal(32)
        lines = Signal(32)
        stop_code = Signal(8)
        stop_bag = Signal(32)
        stop_value = Signal(64)
        with m.If(both):
            with m.If(stop | ens_bad | r_err):          # discard
                m.d.comb += w0_pop.eq(1)
                with m.If(~stop):
                    m.d.sync += stop.eq(1)
                    with m.If(ens_bad):
                        m.d.sync += [
                            stop_code.eq(done_q.r_data), stop_bag.eq(ctx.bag),
                            stop_value.eq(Mux(done_q.r_data == DeviceError.LOG_FULL,
                                              cfg.log_slots, 0))]
                    with m.Else():
                        m.d.sync += [stop_code.eq(DeviceError.MEDIA), stop_bag.eq(0),
                                     stop_value.eq(0)]
            with m.Elif((~need_ens | done_q.r_rdy) & filled & (~w1_v | w1_push)):
                m.d.comb += [w0_pop.eq(1), w0_fire.eq(1), done_q.r_en.eq(need_ens)]
        m.d.comb += [ctx_q.r_en.eq(w0_pop), resp_q.r_en.eq(w0_pop & ~ctx.fwd)]
        # forwarding: line k of a repeat takes line k of the row's previous item from the ring
        src_base = Signal(fb)       # ring slot of the previous item's line 0 (lines k > 0)
        m.d.comb += [
            ws_rd.addr.eq(ctx.ent), ws_wr.addr.eq(ctx.ent), ws_wr.data.eq(lines[:fb]),
            ws_wr.en.eq(w0_fire & (ctx.k == 0)),
            f_rd.addr.eq(Mux(ctx.k == 0, ws_rd.data, src_base + ctx.k)),
            f_rd.en.eq(w0_fire),
        ]
        with m.If(w0_fire & (ctx.k == 0)):
            m.d.sync += src_base.eq(ws_rd.data)
        m.d.sync += row_held.eq(row_held + h_issue - w0_pop)
        m.d.sync += ens_cnt.eq(ens_cnt + ens_pushed - (w0_fire & need_ens))
        m.d.comb += [d_rd.addr.eq((wb + ctx.k)[:dpb]), d_rd.en.eq(w0_fire)]

        w1_addr = Signal(la)
        w1_ent = Signal(eb)
        w1_data = Signal(512)
        w1_fwd = Signal()
        w1_seq = Signal(fb)
        with m.If(w0_fire):
            m.d.sync += [w1_v.eq(1), w1_data.eq(r_data), w1_ent.eq(ctx.ent),
                         w1_fwd.eq(ctx.fwd), w1_seq.eq(lines[:fb]),
                         w1_addr.eq(table_line + (ctx.row << dim_log) + ctx.k),
                         lines.eq(lines + 1)]
            with m.If(ctx.k == n_lines - 1):
                m.d.sync += rows.eq(rows + 1)
                with m.If(ctx.bag_last):
                    m.d.sync += wb.eq(wb + n_lines)
        with m.Elif(w1_push):
            m.d.sync += w1_v.eq(0)

        # ---- W1: subtract, clamp, count saturated lanes ------------------------------------
        outs, sats = [], []
        w1_row = Mux(w1_fwd, f_rd.data, w1_data)
        for i in range(LANES):
            x = w1_row[i * 32:(i + 1) * 32].as_signed()
            dv = d_rd.data[i * DELTA_BITS:(i + 1) * DELTA_BITS].as_signed()
            y = Signal(signed(36), name=f"upd{i}")
            m.d.comb += y.eq(x - dv)
            hi_, lo_ = y > 0x7FFF_FFFF, y < -0x8000_0000
            outs.append(Mux(hi_, 0x7FFF_FFFF, Mux(lo_, 0x8000_0000, y[:32])))
            sats.append(hi_ | lo_)
        m.d.comb += [w1_push.eq(w1_v & wr_q.w_rdy), wr_q.w_en.eq(w1_push),
                     wr_q.w_data.eq(Cat(w1_addr, w1_ent, *outs)),
                     f_wr.addr.eq(w1_seq), f_wr.data.eq(Cat(*outs)), f_wr.en.eq(w1_push)]
        sat_flags = Signal(LANES)
        sat = Signal(32)
        m.d.sync += [sat_flags.eq(Mux(w1_push, Cat(*sats), 0)),
                     sat.eq(sat + sum(sat_flags))]

        # ---- writes and their acknowledgements ---------------------------------------------
        wq_addr = wr_q.r_data[:la]
        wq_ent = wr_q.r_data[la:la + eb]
        wq_data = wr_q.r_data[la + eb:]
        wreq = row_port.wr_req
        m.d.comb += [
            wreq.valid.eq(wr_q.r_rdy & wk_q.w_rdy),
            wreq.payload.id.eq(ID_ROWS), wreq.payload.addr.eq(wq_addr),
            wreq.payload.be.eq(Const(-1, 64)), wreq.payload.data.eq(wq_data),
            wr_q.r_en.eq(wreq.ready & wk_q.w_rdy),
            wk_q.w_en.eq(wreq.valid & wreq.ready), wk_q.w_data.eq(wq_ent),
        ]
        wresp = row_port.wr_resp
        wr_err = Signal()
        m.d.comb += [
            wresp.ready.eq(1),
            wk_q.r_en.eq(wresp.valid),
            rt.dec.eq(wresp.valid & wk_q.r_rdy),
            rt.dec_idx.eq(wk_q.r_data),
        ]
        with m.If(wresp.valid & wresp.payload.err):
            m.d.sync += wr_err.eq(1)

        # ---- control -----------------------------------------------------------------------
        err_code = Signal(8)
        err_value = Signal(64)
        err_bag = Signal(32)
        cycles = Signal(32)
        idx_started = Signal()
        with m.If(walker.idx_start):
            m.d.sync += idx_started.eq(1)
        running = Signal()        # RUN or DRAIN (the readers' media flags belong to this command)
        media_any = running & (off_rd.media_err | (idx_started & idx_rd.media_err) |
                               grad_err | wr_err)
        with m.If(media_any & ~stop & ~(both & ~stop & (ens_bad | r_err))):
            m.d.sync += [stop.eq(1), stop_code.eq(DeviceError.MEDIA), stop_bag.eq(0),
                         stop_value.eq(0)]

        drained = (off_rd.idle & idx_rd.idle & ~seq.items.valid & (s_slice.level == 0) &
                   (it_q.level == 0) & (g_slice.level == 0) & (g_q.level == 0) &
                   (h_slice.level == 0) & (grad_pend == 0) & ~d0_v & ~d1_v &
                   (row_held == 0) & ~w1_v & (wr_q.level == 0) & (wk_q.level == 0) &
                   (ens_slice.level == 0) & (ens_out == 0))
        cpl = self.cpl.payload
        m.d.comb += [
            cpl.err_code.eq(err_code), cpl.err_bag.eq(err_bag), cpl.err_value.eq(err_value),
            cpl.rows.eq(rows), cpl.sat.eq(sat), cpl.lines.eq(lines), cpl.stalls.eq(stalls),
            cpl.cycles.eq(cycles),
        ]

        with m.FSM(name="ctrl"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.comb += clear.eq(1)
                    m.d.sync += [c.eq(self.cmd.payload), cycles.eq(1), err_code.eq(0),
                                 err_value.eq(0), err_bag.eq(0), wr_err.eq(0), grad_err.eq(0),
                                 stop.eq(0), rows.eq(0), lines.eq(0), sat.eq(0),
                                 sat_flags.eq(0), stalls.eq(0), idx_started.eq(0),
                                 ga.eq(0), gf.eq(0), wb.eq(0), kg.eq(0), k.eq(0),
                                 ens_cnt.eq(0), ens_ahead.eq(0), w1_v.eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [dim_log.eq(dl), cycles.eq(cycles + 1)]
                with m.If(chk_err != 0):
                    m.d.sync += [err_code.eq(chk_err), err_value.eq(chk_val)]
                    m.next = "CPL"
                with m.Else():
                    m.d.comb += [off_rd.start.eq(1), walker.start.eq(1)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(stop | seq.err | seq.done):
                    m.d.comb += [off_rd.flush.eq(1), idx_rd.flush.eq(1)]
                    with m.If(seq.err):
                        m.d.sync += [err_code.eq(seq.err_code), err_value.eq(seq.err_value),
                                     err_bag.eq(seq.bag)]
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
