"""Streams little-endian 32-bit words from device memory, prefetching whole lines.

Protocol (one job at a time):
- ``start`` (one-cycle strobe, only when ``idle``): begin at byte address ``start_addr``
  (4-byte aligned). Words are produced in address order on ``words``.
- ``limit`` (byte address, exclusive) bounds prefetch: a line is read only if it starts below
  ``limit``. ``limit`` may grow while the job runs (the owner validates a range, then opens it);
  it must never shrink. Words at or past ``limit`` in the last fetched line may appear on
  ``words``; the consumer takes only what it knows exists.
- ``flush`` (one-cycle strobe; wins over a ``start`` in the same cycle): stop fetching, drop
  buffered lines and, as they arrive, the responses still in flight. ``idle`` rises when nothing is in flight any more.
- ``media_err`` is set by a response with ``err`` during the job (cleared by ``start``).
- Reads use id ``rd_id`` on ``mem`` with at most ``depth`` lines in flight plus buffered, so a
  response always has room and ``mem.rd_resp`` is never back-pressured (see reqport ordering).
  Words pass through a 4-word output FIFO (2 cycles of latency): a line is released when its
  last word enters it, so at most ``depth`` + 1 lines are requested and not yet consumed.

Throughput: one word per cycle while lines arrive in time; sustained needs ``depth`` ≥
latency/16 lines.
"""
from amaranth.hdl import Module, Signal, ResetInserter
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .counting import step
from .reqport import DeviceRequestSignature, RD_CUR, LINE_BITS

__all__ = ["WordReader"]


class WordReader(wiring.Component):
    """Streams 32-bit words from device memory, prefetching whole lines (see the module docstring).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    rd_id : int
        Request id of the line reads.
    depth : int
        Lines in flight plus buffered (a power of two >= 2).

    Members
    -------
    start : In(1), start_addr : In(addr_bits)
        Begin at a 4-byte aligned byte address (only when ``idle``).
    limit : In(addr_bits + 2)
        Prefetch bound (exclusive byte address); may grow while running, never shrink.
    flush : In(1)
        Stop, drop buffered lines and the responses still in flight.
    idle : Out(1)
        Nothing in flight.
    words : Out(stream.Signature(32))
        Words in address order (2 cycles of latency).
    mem : Out(DeviceRequestSignature(addr_bits))
        Line reads (RdCur); ``rd_resp`` is never back-pressured.
    media_err : Out(1)
        A response answered ``err`` (cleared by ``start``).

    Raises
    ------
    ValueError
        If ``depth`` is not a power of two >= 2.
    """

    def __init__(self, addr_bits, *, rd_id, depth=16):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 2, got {depth!r}")
        self._addr_bits, self._rd_id, self._depth = addr_bits, rd_id, depth
        super().__init__({
            "start": In(1),
            "start_addr": In(addr_bits),
            "limit": In(addr_bits + 2),
            "flush": In(1),
            "idle": Out(1),
            "media_err": Out(1),
            "words": Out(stream.Signature(32)),
            "mem": Out(DeviceRequestSignature(addr_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self._depth
        lines = ResetInserter(self.flush)(fifo.SyncFIFOBuffered(width=LINE_BITS, depth=depth))
        m.submodules.lines = lines

        running = Signal()
        next_line = Signal(self._addr_bits - 6)
        in_flight = Signal(range(depth + 1))   # requested, response not yet received
        held = Signal(range(depth + 1))        # requested, line not yet consumed or dropped
        word = Signal(4)

        limit_line = (self.limit + 63) >> 6
        rd = self.mem.rd_req
        m.d.comb += [
            rd.payload.id.eq(self._rd_id),
            rd.payload.op.eq(RD_CUR),
            rd.payload.addr.eq(next_line),
            rd.valid.eq(running & (next_line < limit_line) & (held < depth)),
            self.mem.wr_req.valid.eq(0),
            self.mem.wr_resp.ready.eq(1),
        ]
        issued = rd.valid & rd.ready
        resp = self.mem.rd_resp
        got = resp.valid      # always accepted
        # (FIFOs by hand: lines are pushed only while running and popped word by word; the word
        # FIFO is gated by ``running``, so neither is a plain stream connection)
        m.d.comb += [
            resp.ready.eq(1),
            lines.w_data.eq(resp.payload.data),
            lines.w_en.eq(got & running),
        ]
        # words of the head line go through a small word FIFO: its registered output and
        # w_rdy keep the consumer's ready off the 512-bit line register's enable (the FPGA
        # critical path ran from the word select through the sequencer back into r_en)
        word_q = ResetInserter(self.flush)(fifo.SyncFIFOBuffered(width=32, depth=4))
        m.submodules.word_q = word_q
        m.d.comb += [
            word_q.w_data.eq(lines.r_data.word_select(word, 32)),
            word_q.w_en.eq(lines.r_rdy & running & word_q.w_rdy),
            self.words.valid.eq(word_q.r_rdy & running),
            self.words.payload.eq(word_q.r_data),
            word_q.r_en.eq(self.words.ready & running),
        ]
        consumed_word = word_q.w_en
        popped = consumed_word & (word == 15)
        m.d.comb += lines.r_en.eq(popped)
        dropped = got & ~running     # response of a flushed job

        with m.If(consumed_word):
            m.d.sync += word.eq(word + 1)
        with m.If(issued):
            m.d.sync += next_line.eq(next_line + 1)
        step(m, in_flight, up=issued, down=got)

        with m.If(self.flush):
            m.d.sync += [running.eq(0), held.eq(in_flight + issued - got)]
        with m.Else():
            m.d.sync += held.eq(held + issued - popped - dropped)
        with m.If(self.start & ~running & ~self.flush):     # flush wins over start
            m.d.sync += [running.eq(1), next_line.eq(self.start_addr >> 6),
                         word.eq(self.start_addr[2:6])]
        with m.If(got & running & resp.payload.err):
            m.d.sync += self.media_err.eq(1)
        with m.If(self.start & ~running & ~self.flush):
            m.d.sync += self.media_err.eq(0)
        m.d.comb += self.idle.eq(~running & (in_flight == 0))
        return m
