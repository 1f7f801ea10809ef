"""RowWriter: the UPDATE engine's write stages (join, subtract and clamp, full-line writes)."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..encodings import DeviceError
from ..reqport import wr_req_layout, wr_resp_layout
from .delta import LANES
from .layouts import DELTA_BITS, line_ctx_layout

__all__ = ["RowWriter", "row_line_layout", "stop_layout"]

# a row line read (``err``: its read answered a media error)
row_line_layout = data.StructLayout({"data": 512, "err": 1})
# why the write stage stops the command: ``code`` (DeviceError), ``bag``, ``value``
stop_layout = data.StructLayout({"valid": 1, "code": 8, "bag": 32, "value": 64})


class RowWriter(wiring.Component):
    """Joins each line's context, row data, delta line and ``ensure_done``; writes the result.

    W0 (join): a line moves when its context and (unless forwarded) its row line are there, its
    bag's delta lines are all in the ring (``filled``), its item's ``ensure_done`` answer is
    there (line 0 of a logged item) and W1 has room. A line whose answer is an error or whose
    read answered ``err`` is discarded and raises ``fail`` (unless already ``stop``); while
    ``stop`` every line is discarded. A forwarded line (a repeat of a row in flight) takes
    line k of the row's previous item from a ring of the last ``fwd_lines`` result lines (by
    write sequence number; a per-entry table holds the ring slot of the entry's last line 0).
    W1: ``row - delta`` per lane, clamped to int32 (``sat`` counts clamped lanes), into a
    4-entry write FIFO; writes are full lines; the tracker entry of each write goes into a
    FIFO matched to the in-order acknowledgements (``dec``).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    entries : int
        Row tracker entries.
    fwd_lines : int
        Forwarding ring lines (a power of two covering the most lines written between two
        items of one row).
    ring_lines : int
        Delta ring lines (:class:`DeltaRing` ``depth``).
    max_writes : int
        Writes in flight at most.
    log_slots : int
        ``err_value`` of a LOG_FULL stop.
    wr_id : int
        Request id of the writes.

    Members
    -------
    ctx : In(stream.Signature(line_ctx_layout(entry bits)))
        Line contexts in order.
    lines : In(stream.Signature(row_line_layout))
        Row lines read, in order (none for forwarded lines).
    answers : In(stream.Signature(8))
        ``ensure_done`` codes in item order (used by line 0 of each item when ``need_log``).
    filled : In(range(2 * ring_lines)), freed : Out(range(2 * ring_lines))
        Delta ring lines written; delta ring lines freed (a bag's lines, after its last item).
    delta_addr : Out(range(ring_lines)), delta_en : Out(1), delta : In(LANES * DELTA_BITS)
        The delta ring's synchronous read port.
    table_line : In(addr_bits - 6), dim_log : In(2), need_log : In(1)
        The command's, stable while running.
    stop : In(1)
        Discard every line.
    fail : Out(stop_layout)
        Combinational: a line is discarded for its own error and not yet ``stop``.
    released : Out(1)
        A line left W0 (written or discarded).
    used : Out(1)
        An answer was used.
    wr_req : Out(stream.Signature(wr_req_layout(addr_bits)))
    wr_resp : In(stream.Signature(wr_resp_layout()))
        Always ready.
    dec, dec_idx : Out(1), Out(entry bits)
        A write of tracker entry ``dec_idx`` was acknowledged.
    rows, lines_written, sat : Out(32)
        Rows applied, lines written, lanes clamped (since ``clear``).
    busy : Out(1)
        A line in W1, the write FIFO or waiting for its acknowledgement.
    err : Out(1)
        Sticky until ``clear``: a write answered ``err``.
    clear : In(1)
        Command start.
    """

    def __init__(self, addr_bits, *, entries, fwd_lines, ring_lines, max_writes, log_slots,
                 wr_id):
        self._ab, self._n, self._fwd, self._ring = addr_bits, entries, fwd_lines, ring_lines
        self._max_writes, self._log_slots, self._id = max_writes, log_slots, wr_id
        eb = max(1, ceil_log2(entries))
        pb = ceil_log2(ring_lines) + 1
        super().__init__({
            "ctx": In(stream.Signature(line_ctx_layout(eb))),
            "lines": In(stream.Signature(row_line_layout)),
            "answers": In(stream.Signature(8)),
            "filled": In(pb), "freed": Out(pb),
            "delta_addr": Out(range(ring_lines)), "delta_en": Out(1),
            "delta": In(LANES * DELTA_BITS),
            "table_line": In(addr_bits - 6), "dim_log": In(2), "need_log": In(1),
            "stop": In(1), "fail": Out(stop_layout), "released": Out(1), "used": Out(1),
            "wr_req": Out(stream.Signature(wr_req_layout(addr_bits))),
            "wr_resp": In(stream.Signature(wr_resp_layout())),
            "dec": Out(1), "dec_idx": Out(eb),
            "rows": Out(32), "lines_written": Out(32), "sat": Out(32),
            "busy": Out(1), "err": Out(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        la = self._ab - 6
        eb = max(1, ceil_log2(self._n))
        dpb = ceil_log2(self._ring)
        fb = ceil_log2(self._fwd)
        m.submodules.fring = fring = Memory(shape=512, depth=self._fwd, init=[])
        f_wr = fring.write_port()
        f_rd = fring.read_port(domain="sync", transparent_for=(f_wr,))
        m.submodules.wseq = wseq = Memory(shape=fb, depth=self._n, init=[])
        ws_wr = wseq.write_port()
        ws_rd = wseq.read_port(domain="comb")
        m.submodules.wr_q = wr_q = fifo.SyncFIFOBuffered(width=la + eb + 512, depth=4)
        # first-word-fall-through: a write response may come the cycle after its request
        m.submodules.wk_q = wk_q = fifo.SyncFIFO(width=eb, depth=self._max_writes)
        n_lines = Signal(4)
        m.d.comb += n_lines.eq(1 << self.dim_log)
        wb, lines, rows = self.freed, self.lines_written, self.rows

        # ---- W0: join context, row line, delta line and ensure_done ------------------------
        ctx = self.ctx.payload
        r_err = ~ctx.fwd & self.lines.payload.err
        both = self.ctx.valid & (ctx.fwd | self.lines.valid)
        need_ens = self.need_log & (ctx.k == 0)
        ans = self.answers
        ens_bad = need_ens & ans.valid & (ans.payload != 0)
        filled = (self.filled - wb)[:dpb + 1] >= n_lines
        w1_v = Signal()
        w1_push = Signal()
        w0_fire = Signal()
        w0_pop = self.released
        fail = self.fail
        m.d.comb += [fail.code.eq(Mux(ens_bad, ans.payload, DeviceError.MEDIA)),
                     fail.bag.eq(Mux(ens_bad, ctx.bag, 0)),
                     fail.value.eq(Mux(ens_bad & (ans.payload == DeviceError.LOG_FULL),
                                       self._log_slots, 0))]
        with m.If(both):
            with m.If(self.stop | ens_bad | r_err):          # discard
                m.d.comb += [w0_pop.eq(1), fail.valid.eq(~self.stop)]
            with m.Elif((~need_ens | ans.valid) & filled & (~w1_v | w1_push)):
                m.d.comb += [w0_pop.eq(1), w0_fire.eq(1), ans.ready.eq(need_ens)]
        m.d.comb += [self.ctx.ready.eq(w0_pop), self.lines.ready.eq(w0_pop & ~ctx.fwd),
                     self.used.eq(w0_fire & need_ens)]
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
        m.d.comb += [self.delta_addr.eq((wb + ctx.k)[:dpb]), self.delta_en.eq(w0_fire)]

        w1_addr = Signal(la)
        w1_ent = Signal(eb)
        w1_data = Signal(512)
        w1_fwd = Signal()
        w1_seq = Signal(fb)
        with m.If(w0_fire):
            m.d.sync += [w1_v.eq(1), w1_data.eq(self.lines.payload.data), w1_ent.eq(ctx.ent),
                         w1_fwd.eq(ctx.fwd), w1_seq.eq(lines[:fb]),
                         w1_addr.eq(self.table_line + (ctx.row << self.dim_log) + ctx.k),
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
            dv = self.delta[i * DELTA_BITS:(i + 1) * DELTA_BITS].as_signed()
            y = Signal(signed(36), name=f"upd{i}")
            m.d.comb += y.eq(x - dv)
            hi_, lo_ = y > 0x7FFF_FFFF, y < -0x8000_0000
            outs.append(Mux(hi_, 0x7FFF_FFFF, Mux(lo_, 0x8000_0000, y[:32])))
            sats.append(hi_ | lo_)
        m.d.comb += [w1_push.eq(w1_v & wr_q.w_rdy), wr_q.w_en.eq(w1_push),
                     wr_q.w_data.eq(Cat(w1_addr, w1_ent, *outs)),
                     f_wr.addr.eq(w1_seq), f_wr.data.eq(Cat(*outs)), f_wr.en.eq(w1_push)]
        sat_flags = Signal(LANES)
        m.d.sync += [sat_flags.eq(Mux(w1_push, Cat(*sats), 0)),
                     self.sat.eq(self.sat + sum(sat_flags))]

        # ---- writes and their acknowledgements ---------------------------------------------
        # (each write also pushes its tracker entry into wk_q: a fork, driven by hand)
        wreq = self.wr_req
        m.d.comb += [
            wreq.valid.eq(wr_q.r_rdy & wk_q.w_rdy),
            wreq.payload.id.eq(self._id), wreq.payload.addr.eq(wr_q.r_data[:la]),
            wreq.payload.be.eq(Const(-1, 64)), wreq.payload.data.eq(wr_q.r_data[la + eb:]),
            wr_q.r_en.eq(wreq.ready & wk_q.w_rdy),
            wk_q.w_en.eq(wreq.valid & wreq.ready), wk_q.w_data.eq(wr_q.r_data[la:la + eb]),
        ]
        wresp = self.wr_resp
        m.d.comb += [
            wresp.ready.eq(1),
            wk_q.r_en.eq(wresp.valid),
            self.dec.eq(wresp.valid & wk_q.r_rdy),
            self.dec_idx.eq(wk_q.r_data),
            self.busy.eq(w1_v | (wr_q.level != 0) | (wk_q.level != 0)),
        ]
        with m.If(wresp.valid & wresp.payload.err):
            m.d.sync += self.err.eq(1)
        with m.If(self.clear):
            m.d.sync += [rows.eq(0), lines.eq(0), self.sat.eq(0), sat_flags.eq(0), wb.eq(0),
                         w1_v.eq(0), self.err.eq(0)]
        return m
