"""Pooling accumulator: sums the lines of each bag exactly and emits saturated output lines.

Consumes tags (from the in-flight FIFO, in issue order) and row responses (same order). For a
tag of line ``k``: ``first`` starts a new sum, otherwise the line is added to accumulator ``k``
(16 lanes of ``acc_bits`` signed bits, exact); on ``last`` the lane sums are saturated to int32
and the output line is emitted on ``out`` at the next output line address (``out_line`` after
``start``), one per cycle. An ``empty`` tag emits a zero line without a response. ``sat``
counts saturated lanes (one cycle after the line is emitted), ``lines`` the output lines
emitted, ``media_err`` is set by a response with ``err``. Throughput: one line per cycle;
latency: one cycle (a bag's sums wait in an output register, saturated on the way out).
"""
from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..reqport import rd_resp_layout
from .layouts import tag_layout

__all__ = ["PoolAccumulator", "out_layout"]

LANES = 16


def out_layout(addr_bits):
    return data.StructLayout({"addr": addr_bits - 6, "data": LANES * 32})


class PoolAccumulator(wiring.Component):
    """Exact per-bag sums of the row lines, saturated to int32 on output (see the module docstring).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    acc_bits : int
        Accumulator lane width (signed; exact for the longest bag).

    Members
    -------
    tags : In(stream.Signature(tag_layout))
        Line tags in issue order.
    resp : In(stream.Signature(rd_resp_layout()))
        Row line responses in the same order (an ``empty`` tag takes none).
    out : Out(stream.Signature(out_layout(addr_bits)))
        Pooled output lines at ``out_line``, ``out_line + 1``, ... (from the output register,
        loaded with the last line's response).
    start : In(1), out_line : In(addr_bits - 6)
        Command start: the first output line address; counters to 0.
    sat : Out(32)
        Saturated lanes (one cycle after the line is emitted).
    lines : Out(32)
        Output lines emitted.
    media_err : Out(1)
        A response answered ``err``.
    idle : Out(1)
        No output line waits in the output register.
    """

    def __init__(self, addr_bits, *, acc_bits):
        self._acc_bits = acc_bits
        super().__init__({
            "tags": In(stream.Signature(tag_layout)),
            "resp": In(stream.Signature(rd_resp_layout())),
            "out": Out(stream.Signature(out_layout(addr_bits))),
            "start": In(1),
            "out_line": In(addr_bits - 6),
            "sat": Out(32),
            "lines": Out(32),
            "media_err": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ab = self._acc_bits
        # Accumulators in an 8-entry memory with an asynchronous read port (LUT RAM on FPGAs)
        # rather than eight registers behind a 768-bit multiplexer: same single-cycle
        # read-modify-write, much less fan-out on ``k`` (the FPGA critical path was that mux).
        m.submodules.acc = acc = Memory(shape=LANES * ab, depth=8, init=[])
        acc_rd = acc.read_port(domain="comb")
        acc_wr = acc.write_port()
        tag = self.tags.payload
        m.d.comb += acc_rd.addr.eq(tag.k)
        cur = acc_rd.data
        sums = []
        for i in range(LANES):
            x = self.resp.payload.data[i * 32:(i + 1) * 32].as_signed()
            a = cur[i * ab:(i + 1) * ab].as_signed()
            s = Signal(signed(ab), name=f"sum{i}")
            m.d.comb += s.eq(Mux(tag.first, 0, a) + x)
            sums.append(s)

        # output stage: a bag's lane sums (or an empty bag's zero line) wait in a register,
        # saturated on the way out (no path from the accumulator read through the add and the
        # saturation into the consumer)
        o_valid, o_empty = Signal(), Signal()
        o_sums = Signal(LANES * ab)
        o_addr = Signal.like(self.out_line)
        outs, sats = [], []
        for i in range(LANES):
            s = o_sums[i * ab:(i + 1) * ab].as_signed()
            # above int32 max: sign clear and a bit 31.. set; below int32 min: sign set and not
            # all of bits 31.. set (bit tests, not a second carry chain after the add's)
            top = s[31:ab - 1]
            hi, lo = ~s[ab - 1] & top.any(), s[ab - 1] & ~top.all()
            outs.append(Mux(hi, 0x7FFF_FFFF, Mux(lo, 0x8000_0000, s[:32])))
            sats.append(hi | lo)
        m.d.comb += [self.out.valid.eq(o_valid), self.out.payload.addr.eq(o_addr),
                     self.out.payload.data.eq(Mux(o_empty, 0, Cat(*outs))),
                     self.idle.eq(~o_valid)]
        emitted = self.out.valid & self.out.ready
        room = ~o_valid | self.out.ready
        load = Signal()

        ptr = Signal.like(self.out_line)
        with m.If(tag.empty):
            m.d.comb += [load.eq(self.tags.valid & room), self.tags.ready.eq(room)]
        with m.Else():
            consume = self.tags.valid & self.resp.valid & (~tag.last | room)
            m.d.comb += [load.eq(consume & tag.last),
                         self.tags.ready.eq(consume), self.resp.ready.eq(consume)]
            m.d.comb += [acc_wr.addr.eq(tag.k), acc_wr.data.eq(Cat(*sums)),
                         acc_wr.en.eq(consume & ~tag.last)]
            with m.If(consume):
                with m.If(self.resp.payload.err):
                    m.d.sync += self.media_err.eq(1)
        with m.If(load):
            m.d.sync += [o_valid.eq(1), o_empty.eq(tag.empty), o_sums.eq(Cat(*sums)),
                         o_addr.eq(ptr), ptr.eq(ptr + 1)]
        with m.Elif(emitted):
            m.d.sync += o_valid.eq(0)
        # saturation flags of the line just emitted, counted one cycle later (off the path)
        sat_flags = Signal(LANES)
        m.d.sync += [sat_flags.eq(Mux(emitted & ~o_empty, Cat(*sats), 0)),
                     self.sat.eq(self.sat + sum(sat_flags))]
        with m.If(emitted):
            m.d.sync += self.lines.eq(self.lines + 1)
        with m.If(self.start):
            m.d.sync += [ptr.eq(self.out_line), self.lines.eq(0), self.sat.eq(0),
                         sat_flags.eq(0), self.media_err.eq(0)]
        return m
