"""ReadRegister, WriteRegister: the persist engine's registered read and write requests."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import LINE_BYTES
from ..counting import step
from ..reqport import RD_CUR, rd_req_layout, rd_resp_layout, wr_req_layout, wr_resp_layout

__all__ = ["ReadRegister", "WriteRegister"]


class ReadRegister(wiring.Component):
    """One registered read request (RdCur) and the kinds of the reads in flight.

    A ``load`` (only when ``free``) places a read of line ``addr`` in the request register
    (``rd_req.valid`` the next cycle) and pushes its ``kind`` into a FIFO of ``depth``
    entries; each response (in order, one id) pops it, so ``resp_kind`` is the kind of the
    response on ``rd_resp`` (first-word-fall-through).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    depth : int
        Reads in flight at most.
    rd_id : int
        Request id.

    Members
    -------
    load : In(1), addr : In(addr_bits - 6), kind : In(1)
        Load a read.
    free : Out(1)
        A load is accepted this cycle (the register empties or is empty, the FIFO has room).
    rd_req : Out(stream.Signature(rd_req_layout(addr_bits)))
    rd_resp : In(stream.Signature(rd_resp_layout()))
        Always ready.
    resp_kind : Out(1)
        Kind of the response on ``rd_resp``.
    idle : Out(1)
        No read requested or in flight.
    """

    def __init__(self, addr_bits, *, depth, rd_id):
        self._depth, self._id = depth, rd_id
        super().__init__({
            "load": In(1), "addr": In(addr_bits - 6), "kind": In(1), "free": Out(1),
            "rd_req": Out(stream.Signature(rd_req_layout(addr_bits))),
            "rd_resp": In(stream.Signature(rd_resp_layout())),
            "resp_kind": Out(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # (pushed by ``load`` and popped by every response, which is always taken: the FIFO
        # has no stream partner on either side)
        m.submodules.tags = tags = fifo.SyncFIFO(width=1, depth=self._depth)
        rq = self.rd_req
        rq_addr = Signal.like(self.addr)
        m.d.comb += [
            self.free.eq((~rq.valid | rq.ready) & tags.w_rdy),
            rq.payload.id.eq(self._id), rq.payload.op.eq(RD_CUR), rq.payload.addr.eq(rq_addr),
            tags.w_en.eq(self.load), tags.w_data.eq(self.kind),
            self.rd_resp.ready.eq(1), tags.r_en.eq(self.rd_resp.valid),
            self.resp_kind.eq(tags.r_data),
            self.idle.eq(~rq.valid & ~tags.r_rdy),
        ]
        with m.If(self.load):
            m.d.sync += [rq.valid.eq(1), rq_addr.eq(self.addr)]
        with m.Elif(rq.ready):
            m.d.sync += rq.valid.eq(0)
        return m


class WriteRegister(wiring.Component):
    """One registered write request and the count of writes not yet acknowledged.

    A ``load`` (only when ``free``) places a write in the request register: a full line from
    the line buffer (``from_buf``: ``buf_data``, read through a synchronous port enabled by
    ``buf_en`` and held while the write stalls), or superblock bytes: ``data`` (bytes 0..15),
    or with ``hi`` ``data[:64]`` placed in bytes 32..39 (``recovery_epoch``).

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    max_writes : int
        Width of ``outstanding`` (writes in flight at most).
    wr_id : int
        Request id.

    Members
    -------
    load : In(1), addr : In(addr_bits - 6), be : In(64), from_buf : In(1), data : In(128),
    hi : In(1)
        Load a write.
    free : Out(1)
        The register empties or is empty.
    buf_en : Out(1), buf_data : In(512)
        The line buffer's read port (enable, data the cycle after).
    wr_req : Out(stream.Signature(wr_req_layout(addr_bits)))
    wr_resp : In(stream.Signature(wr_resp_layout()))
        Always ready.
    outstanding : Out(range(max_writes + 1))
        Writes loaded and not yet acknowledged.
    """

    def __init__(self, addr_bits, *, max_writes, wr_id):
        self._id = wr_id
        super().__init__({
            "load": In(1), "addr": In(addr_bits - 6), "be": In(LINE_BYTES),
            "from_buf": In(1), "data": In(128), "hi": In(1), "free": Out(1),
            "buf_en": Out(1), "buf_data": In(8 * LINE_BYTES),
            "wr_req": Out(stream.Signature(wr_req_layout(addr_bits))),
            "wr_resp": In(stream.Signature(wr_resp_layout())),
            "outstanding": Out(range(max_writes + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        wr = self.wr_req
        addr, be, from_buf = Signal.like(self.addr), Signal(LINE_BYTES), Signal()
        data = Signal(128)             # bytes 0..15 of a superblock write ...
        hi = Signal()                  # ... or data[:64] in bytes 32..39 (recovery_epoch)
        m.d.comb += [
            self.free.eq(~wr.valid | wr.ready),
            wr.payload.id.eq(self._id), wr.payload.addr.eq(addr), wr.payload.be.eq(be),
            wr.payload.data.eq(Mux(from_buf, self.buf_data,
                                   Mux(hi, data[:64] << 256, data))),
            self.buf_en.eq(self.free),
            self.wr_resp.ready.eq(1),
        ]
        with m.If(self.load):
            m.d.sync += [wr.valid.eq(1), addr.eq(self.addr), be.eq(self.be),
                         from_buf.eq(self.from_buf),
                         data.eq(self.data), hi.eq(self.hi)]
        with m.Elif(wr.ready):
            m.d.sync += wr.valid.eq(0)
        step(m, self.outstanding, up=self.load, down=self.wr_resp.valid)
        return m
