"""RowReader: the UPDATE engine's row stage (same-row hazard check, one RdOwn line per cycle)."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..counting import step
from ..reqport import RD_OWN, rd_req_layout
from .layouts import line_ctx_layout, upd_item_layout
from .rows import RowTracker

__all__ = ["RowReader"]


class RowReader(wiring.Component):
    """Turns row items into line reads and line contexts, keeping same-row updates in order.

    An item taken from ``items`` waits in a holding register while the :class:`RowTracker`
    (``entries`` table entries in ``ways`` ways plus ``victims``) looks its row up (one cycle,
    repeated every cycle it waits). Before its first line: no match, it takes a free entry and
    reads its lines (RdOwn); a match, it joins that entry and reads nothing (its lines are
    forwarded from the row's previous item at the write stage); no entry can take its row, it
    waits (``stalls`` counts these cycles). Unless ``nolog``, an item also waits for its own
    ``ensure_done`` (``answered`` counts them in; ``ens_ahead`` of them are waiting). One line per cycle, each
    with a context entry; at most ``max_lines`` lines read and not yet taken by the write stage
    (so row responses always have room).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    entries : int
        Row tracker table entries (:class:`RowTracker`).
    ways : int
        Row tracker ways.
    victims : int
        Row tracker victim CAM entries.
    count_bits : int
        Row tracker line-count width.
    max_lines : int
        Lines read and not yet ``released``, at most.
    max_answers : int
        Answered ensures not yet used, at most (counter width).
    rd_id : int
        Request id of the row reads.

    Members
    -------
    items : In(stream.Signature(upd_item_layout))
        Row items (after their gradient reads).
    rd_req : Out(stream.Signature(rd_req_layout(addr_bits)))
        Row line reads (RdOwn, line ``table_line + (row << dim_log) + k``).
    ctx : Out(stream.Signature(line_ctx_layout(RowTracker.index_bits(entries))))
        One per line, read or forwarded, in order.
    table_line : In(addr_bits - 6), dim_log : In(2), need_log : In(1)
        The command's, stable while running.
    answered : In(1)
        An ``ensure_done`` was received.
    released : In(1)
        The write stage took one line.
    dec, dec_idx : In(1), In(entry bits)
        A row line's write was acknowledged (:class:`RowTracker` ``dec``).
    q_row : In(32), q_busy : Out(1)
        The undo logger's query (``UpdateEngine.q_busy``); also 1 in the first cycle of a new
        ``q_row`` (the tracker answers a cycle later).
    held : Out(range(max_lines + 1))
        Lines read and not yet released.
    holding : Out(1)
        An item waits in the holding register.
    stalls : Out(32)
        Cycles an item waited for a tracker entry.
    stop : In(1)
        Drop items, restart the item's line count.
    clear : In(1)
        Command start: line count, ``stalls`` and answers to 0.
    free_rows : In(1)
        Free every tracker entry (the command drained; :class:`RowTracker` ``clear``).
    """

    def __init__(self, addr_bits, *, entries, ways, victims, count_bits, max_lines,
                 max_answers, rd_id):
        self._ab, self._n, self._ways, self._v = addr_bits, entries, ways, victims
        self._cb = count_bits
        self._max_lines, self._max_ans, self._id = max_lines, max_answers, rd_id
        eb = RowTracker.index_bits(entries)
        super().__init__({
            "items": In(stream.Signature(upd_item_layout)),
            "rd_req": Out(stream.Signature(rd_req_layout(addr_bits))),
            "ctx": Out(stream.Signature(line_ctx_layout(eb))),
            "table_line": In(addr_bits - 6), "dim_log": In(2), "need_log": In(1),
            "answered": In(1), "released": In(1), "dec": In(1), "dec_idx": In(eb),
            "q_row": In(32), "q_busy": Out(1),
            "held": Out(range(max_lines + 1)), "holding": Out(1), "stalls": Out(32),
            "stop": In(1), "clear": In(1), "free_rows": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rows_t = rt = RowTracker(self._n, ways=self._ways, victims=self._v,
                                               count_bits=self._cb)
        eb = RowTracker.index_bits(self._n)
        # holding register: the item whose row the tracker's results describe
        hi = Signal.like(self.items.payload)
        h_valid, h_done, take = Signal(), Signal(), Signal()
        m.d.comb += [take.eq(self.items.valid & (~h_valid | h_done) & ~self.stop),
                     self.items.ready.eq(take | self.stop), self.holding.eq(h_valid),
                     rt.q.load.eq(take), rt.q.new.eq(self.items.payload.index),
                     rt.q.held.eq(hi.index)]
        with m.If(take):
            m.d.sync += [hi.eq(self.items.payload), h_valid.eq(1)]
        with m.Elif(h_done | self.stop):
            m.d.sync += h_valid.eq(0)
        k = Signal(3)
        n_lines = Signal(4)
        m.d.comb += n_lines.eq(1 << self.dim_log)
        h_rd = self.rd_req
        credit = self.held < self._max_lines
        h_last = k == n_lines - 1
        cur_ent = Signal(eb)                  # tracker entry of the item (lines k > 0)
        cur_fwd = Signal()                    # the item is a repeat (lines k > 0)
        first = k == 0
        blocked = first & ~rt.hit & rt.full
        # ensure_done received, item not yet entered (see ``q_busy``)
        ens_ahead = Signal(range(self._max_ans + 1))
        ens_wait = first & self.need_log & (ens_ahead == 0)
        enter = Signal()                      # an item enters the row stage (its first line)
        fwd_now = Mux(first, rt.hit, cur_fwd)
        ent_now = Mux(first, Mux(rt.hit, rt.hit_idx, rt.free_idx), cur_ent)
        ctx_in = self.ctx.payload
        m.d.comb += [
            rt.alloc_count.eq(n_lines), rt.clear.eq(self.free_rows),
            rt.dec.eq(self.dec), rt.dec_idx.eq(self.dec_idx),
            ctx_in.ent.eq(ent_now), ctx_in.fwd.eq(fwd_now),
            h_rd.payload.id.eq(self._id), h_rd.payload.op.eq(RD_OWN),
            h_rd.payload.addr.eq(self.table_line + (hi.index << self.dim_log) + k),
            ctx_in.row.eq(hi.index), ctx_in.k.eq(k), ctx_in.bag_last.eq(hi.last),
            ctx_in.bag.eq(hi.bag),
        ]
        h_issue = Signal()
        with m.If(self.stop):
            m.d.sync += k.eq(0)
        with m.Elif(h_valid):
            can = ~blocked & ~ens_wait & credit & self.ctx.ready
            m.d.comb += [h_rd.valid.eq(can & ~fwd_now),
                         h_issue.eq(can & (fwd_now | h_rd.ready))]
            with m.If(blocked):
                m.d.sync += self.stalls.eq(self.stalls + 1)
            with m.If(h_issue):
                m.d.comb += [self.ctx.valid.eq(1), rt.alloc.eq(first & ~rt.hit),
                             rt.join.eq(first & rt.hit)]
                with m.If(first):
                    m.d.comb += enter.eq(1)
                    m.d.sync += [cur_ent.eq(ent_now), cur_fwd.eq(rt.hit)]
                with m.If(h_last):
                    m.d.sync += k.eq(0)
                    m.d.comb += h_done.eq(1)
                with m.Else():
                    m.d.sync += k.eq(k + 1)

        step(m, ens_ahead, up=self.answered, down=enter & self.need_log)
        # the tracker answers for last cycle's q_row: a new q_row is busy for its first cycle
        q_prev = Signal(32)
        m.d.sync += q_prev.eq(self.q_row)
        m.d.comb += [rt.q2_row.eq(self.q_row),
                     self.q_busy.eq(~self.stop & (rt.q2_hit | (self.q_row != q_prev) |
                                                  (ens_ahead != 0)))]
        step(m, self.held, up=h_issue, down=self.released)
        with m.If(self.clear):
            m.d.sync += [self.stalls.eq(0), k.eq(0), ens_ahead.eq(0)]
        return m
