"""The DCOH's media side: lane requests onto the media port, responses back to host or engines."""
from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..config import DeviceConfig
from ..cxl.messages import channel_signature
from ..cxl_encodings import DRSOpcode, MetaField, NDROpcode, HOST_MEDIA_ID
from ..reqport import DeviceRequestSignature, rd_resp_layout, wr_resp_layout
from .merge import RoundRobinMerge

__all__ = ["MediaRouting", "LANE_FIFO", "host_read_layout", "device_read_layout",
           "write_layout", "ndr_entry_layout"]

LANE_FIFO = 3  # SyncFIFOBuffered depth (>= 3: a depth-1 inner FIFO has a zero-width address)


def host_read_layout(lb):
    """A host lane media read: line, CXL tag."""
    return data.StructLayout({"line": lb, "tag": 16})


def device_read_layout(lb):
    """A device read lane media read: engine id, RdCur/RdOwn, line."""
    return data.StructLayout({"id": 4, "op": 1, "line": lb})


def write_layout(lb):
    """An entry of the write queue (both lanes, in service order); ``poison``: a host write
    with poison (the media keeps it per line)."""
    return data.StructLayout({"id": 4, "line": lb, "be": 64, "data": 512, "host": 1, "tag": 16,
                              "poison": 1})


def ndr_entry_layout():
    """A host lane NDR: opcode, CXL tag."""
    return data.StructLayout({"opcode": 3, "tag": 16})


class MediaRouting(wiring.Component):
    """The DCOH's media side: the lanes' requests onto ``mem``, the responses back.

    Reads of the host lane (``host_rd``) and the device read lane (``dev_rd``) are merged
    round-robin onto ``mem.rd_req``; the write queue (``wr``, both lanes in service order) goes
    to ``mem.wr_req`` as it is (with its poison bit). A context FIFO per direction, pushed in
    ``mem`` request order, routes each response back: a host read to a DRS MemData (poison =
    the media's poison bit of the line, or a media error), a host write to an NDR Cmp, a device
    request to ``dev_rd_resp`` / ``dev_wr_resp`` by id (a poisoned line or a media error sets
    ``err``). The host lane's NDRs (``host_ndr``) and the write Cmps are merged round-robin
    onto ``s2m_ndr``; its refused/NXM reads (``drs_nxm``, tags) and the MemData onto
    ``s2m_drs`` (``MemDataNXM`` with poison and all-ones data).

    Latency: no register on any path (merges and FIFO read sides only); the context FIFOs add
    none to a response. Ordering: ``mem`` must return read responses in read-request order and
    write responses in write-request order, across ids (MediaAXI meets this).

    Parameters
    ----------
    cfg : DeviceConfig
        ``addr_bits``, ``max_reads`` / ``max_writes`` (context FIFO depths), ``host_reads``
        (DevLoad thresholds), ``wr_buckets``.

    Members
    -------
    host_rd : In(stream.Signature(host_read_layout))
    dev_rd : In(stream.Signature(device_read_layout))
    wr : In(stream.Signature(write_layout))
    host_ndr : In(stream.Signature(ndr_entry_layout))
    drs_nxm : In(stream.Signature(16))
        The lanes' queues (read sides of their FIFOs).
    mem : Out(DeviceRequestSignature(cfg.addr_bits, poison=True))
        The media port.
    dev_rd_resp, dev_wr_resp : Out(stream.Signature(...))
        The engines' responses (``DeviceRequestSignature`` response layouts).
    s2m_ndr, s2m_drs : Out(stream.Signature(...))
        The host's NDR and DRS channels; ``dev_load`` from ``host_rd_inflight`` (thresholds 1/2,
        3/4, 7/8 of ``cfg.host_reads``), held while a message waits.
    host_rd_inflight : In(range(cfg.host_reads + 1))
    host_rd_done : Out(1)
        A host read's response went out.
    host_wr_done, dev_wr_done : Out(1), wr_done_bucket : Out(max(1, log2 wr_buckets))
        A host / device write's response went out; the write bucket of its line.
    media_err : Out(1)
        A host read's media response had an error.

    Errors: none of its own; the payload of every output reads 0 while not valid.
    """

    def __init__(self, cfg: DeviceConfig):
        self.cfg = cfg
        ab = cfg.addr_bits
        lb = ab - 6
        self._hb = ceil_log2(cfg.wr_buckets)
        super().__init__({
            "host_rd": In(stream.Signature(host_read_layout(lb))),
            "dev_rd": In(stream.Signature(device_read_layout(lb))),
            "wr": In(stream.Signature(write_layout(lb))),
            "host_ndr": In(stream.Signature(ndr_entry_layout())),
            "drs_nxm": In(stream.Signature(16)),
            "mem": Out(DeviceRequestSignature(ab, poison=True)),
            "dev_rd_resp": Out(stream.Signature(rd_resp_layout())),
            "dev_wr_resp": Out(stream.Signature(wr_resp_layout())),
            "s2m_ndr": Out(channel_signature("s2m_ndr")),
            "s2m_drs": Out(channel_signature("s2m_drs")),
            "host_rd_inflight": In(range(cfg.host_reads + 1)),
            "host_rd_done": Out(1),
            "host_wr_done": Out(1),
            "dev_wr_done": Out(1),
            "wr_done_bucket": Out(max(self._hb, 1)),
            "media_err": Out(1),
        })

    @staticmethod
    def _route_response(m, resp, ctx, to_host, host_ready, dev_resp):
        """Route media response stream ``resp`` by the head of its context FIFO ``ctx``: to the
        host side (``to_host``; taken with ``host_ready``) or to the engines' ``dev_resp``
        (id copied; the caller sets the rest of its payload). Pops ``ctx`` with each transfer.
        Returns (host-side valid, transfer strobe)."""
        host_valid = Signal()
        done = Signal()
        m.d.comb += [
            host_valid.eq(resp.valid & ctx.r_rdy & to_host),
            resp.ready.eq(ctx.r_rdy & Mux(to_host, host_ready, dev_resp.ready)),
            done.eq(resp.valid & resp.ready),
            ctx.r_en.eq(done),
            dev_resp.valid.eq(resp.valid & ctx.r_rdy & ~to_host),
            dev_resp.payload.id.eq(resp.payload.id),
        ]
        return host_valid, done

    @staticmethod
    def _stable_load(m, st, live, name):
        """``dev_load`` for an output stream, held while a message waits for ready (payload
        stable while valid), else the live value."""
        hold = Signal(name=f"{name}_load_hold")
        held = Signal(2, name=f"{name}_load_held")
        out = Signal(2, name=f"{name}_dev_load")
        m.d.comb += out.eq(Mux(hold, held, live))
        m.d.sync += [hold.eq(st.valid & ~st.ready), held.eq(out)]
        return out

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        lb = cfg.addr_bits - 6
        hb = self._hb
        wr_cap = cfg.max_writes + 4 * LANE_FIFO
        rc, wc = self._requests(m, lb, hb, wr_cap)
        mr, mw = self.mem.rd_resp, self.mem.wr_resp
        # reads: host → DRS MemData, device → dev_rd_resp (poisoned line → err)
        drs_data_ready = Signal()
        drs_data_valid, rd_done = self._route_response(m, mr, self._rd_ctx, rc.host,
                                                       drs_data_ready, self.dev_rd_resp)
        m.d.comb += [
            self.dev_rd_resp.payload.err.eq(mr.payload.err | mr.payload.poison),
            self.dev_rd_resp.payload.data.eq(mr.payload.data),
            self.host_rd_done.eq(rd_done & rc.host),
            self.media_err.eq(rd_done & rc.host & mr.payload.err),
        ]
        # writes: host → NDR Cmp, device → dev_wr_resp; either way the bucket is uncounted
        cmp_ready = Signal()
        cmp_valid, wr_done = self._route_response(m, mw, self._wr_ctx, wc.host, cmp_ready,
                                                  self.dev_wr_resp)
        m.d.comb += [
            self.dev_wr_resp.payload.err.eq(mw.payload.err),
            self.host_wr_done.eq(wr_done & wc.host),
            self.dev_wr_done.eq(wr_done & ~wc.host),
            self.wr_done_bucket.eq(wc.bucket),
        ]
        dev_load = self._dev_load(m)
        self._host_channels(m, dev_load, cmp_valid, cmp_ready, wc, drs_data_valid,
                            drs_data_ready, rc, mr)
        # payloads read zero while not valid: FIFO memories start undefined in four-state
        # simulators (Icarus), and a defined boundary keeps traces comparable across simulators
        for st in (self.s2m_ndr, self.s2m_drs, self.mem.rd_req, self.mem.wr_req,
                   self.dev_rd_resp, self.dev_wr_resp):
            with m.If(~st.valid):
                m.d.comb += st.payload.eq(0)
        return m

    def _requests(self, m, lb, hb, wr_cap):
        """Read merge and context FIFOs; returns views of the read and write contexts."""
        cfg = self.cfg
        rd_l = data.StructLayout({"id": 4, "op": 1, "line": lb, "host": 1, "tag": 16})
        m.submodules.rd_merge = rd_merge = RoundRobinMerge(rd_l)
        hr, drq, wo = self.host_rd.payload, self.dev_rd.payload, self.wr.payload
        m.d.comb += [
            rd_merge.a.valid.eq(self.host_rd.valid), self.host_rd.ready.eq(rd_merge.a.ready),
            rd_merge.a.payload.id.eq(HOST_MEDIA_ID), rd_merge.a.payload.line.eq(hr.line),
            rd_merge.a.payload.host.eq(1), rd_merge.a.payload.tag.eq(hr.tag),
            rd_merge.b.valid.eq(self.dev_rd.valid), self.dev_rd.ready.eq(rd_merge.b.ready),
            rd_merge.b.payload.id.eq(drq.id), rd_merge.b.payload.op.eq(drq.op),
            rd_merge.b.payload.line.eq(drq.line),
        ]
        rd_ctx_l = data.StructLayout({"host": 1, "tag": 16})
        wr_ctx_l = data.StructLayout({"host": 1, "tag": 16, "bucket": max(hb, 1)})
        m.submodules.rd_ctx = rd_ctx = fifo.SyncFIFOBuffered(width=rd_ctx_l.size,
                                                             depth=cfg.max_reads + 4 * LANE_FIFO)
        m.submodules.wr_ctx = wr_ctx = fifo.SyncFIFOBuffered(width=wr_ctx_l.size, depth=wr_cap)
        self._rd_ctx, self._wr_ctx = rd_ctx, wr_ctx
        ro = rd_merge.o
        m.d.comb += [
            self.mem.rd_req.valid.eq(ro.valid & rd_ctx.w_rdy),
            ro.ready.eq(self.mem.rd_req.ready & rd_ctx.w_rdy),
            self.mem.rd_req.payload.id.eq(ro.payload.id),
            self.mem.rd_req.payload.op.eq(ro.payload.op),
            self.mem.rd_req.payload.addr.eq(ro.payload.line),
            rd_ctx.w_en.eq(self.mem.rd_req.valid & self.mem.rd_req.ready),
            rd_ctx.w_data.eq(Cat(ro.payload.host, ro.payload.tag)),
            self.mem.wr_req.valid.eq(self.wr.valid & wr_ctx.w_rdy),
            self.wr.ready.eq(self.mem.wr_req.ready & wr_ctx.w_rdy),
            self.mem.wr_req.payload.id.eq(wo.id),
            self.mem.wr_req.payload.addr.eq(wo.line),
            self.mem.wr_req.payload.be.eq(wo.be),
            self.mem.wr_req.payload.data.eq(wo.data),
            self.mem.wr_req.payload.poison.eq(wo.poison),
            wr_ctx.w_en.eq(self.mem.wr_req.valid & self.mem.wr_req.ready),
            wr_ctx.w_data.eq(Cat(wo.host, wo.tag, wo.line[:hb] if hb else Const(0, 1))),
        ]
        rc, wc = Signal(rd_ctx_l), Signal(wr_ctx_l)
        m.d.comb += [rc.eq(rd_ctx.r_data), wc.eq(wr_ctx.r_data)]
        return rc, wc

    def _dev_load(self, m):
        """DevLoad from the host reads in flight."""
        dev_load = Signal(2)
        inflight, cap = self.host_rd_inflight, self.cfg.host_reads
        with m.If(inflight < cap // 2):
            m.d.comb += dev_load.eq(0)
        with m.Elif(inflight < cap * 3 // 4):
            m.d.comb += dev_load.eq(1)
        with m.Elif(inflight < cap * 7 // 8):
            m.d.comb += dev_load.eq(2)
        with m.Else():
            m.d.comb += dev_load.eq(3)
        return dev_load

    def _host_channels(self, m, dev_load, cmp_valid, cmp_ready, wc, drs_data_valid,
                       drs_data_ready, rc, mr):
        """S2M NDR (host lane NDRs + write Cmps) and DRS (NXM + MemData), round-robin each."""
        m.submodules.ndr_merge = ndr_merge = RoundRobinMerge(ndr_entry_layout())
        m.d.comb += [
            ndr_merge.a.valid.eq(self.host_ndr.valid), self.host_ndr.ready.eq(ndr_merge.a.ready),
            ndr_merge.a.payload.eq(self.host_ndr.payload),
            ndr_merge.b.valid.eq(cmp_valid), cmp_ready.eq(ndr_merge.b.ready),
            ndr_merge.b.payload.opcode.eq(NDROpcode.CMP), ndr_merge.b.payload.tag.eq(wc.tag),
        ]
        ndr = self.s2m_ndr
        m.d.comb += [ndr.valid.eq(ndr_merge.o.valid), ndr_merge.o.ready.eq(ndr.ready),
                     ndr.payload.hdr.opcode.eq(ndr_merge.o.payload.opcode),
                     ndr.payload.hdr.tag.eq(ndr_merge.o.payload.tag),
                     ndr.payload.hdr.meta_field.eq(MetaField.NO_OP),
                     ndr.payload.hdr.dev_load.eq(self._stable_load(m, ndr, dev_load, "ndr"))]

        drs_m_l = data.StructLayout({"opcode": 3, "tag": 16, "poison": 1, "data": 512})
        m.submodules.drs_merge = drs_merge = RoundRobinMerge(drs_m_l)
        m.d.comb += [
            drs_merge.a.valid.eq(self.drs_nxm.valid), self.drs_nxm.ready.eq(drs_merge.a.ready),
            drs_merge.a.payload.opcode.eq(DRSOpcode.MEM_DATA_NXM),
            drs_merge.a.payload.tag.eq(self.drs_nxm.payload), drs_merge.a.payload.poison.eq(1),
            drs_merge.a.payload.data.eq((1 << 512) - 1),
            drs_merge.b.valid.eq(drs_data_valid), drs_data_ready.eq(drs_merge.b.ready),
            drs_merge.b.payload.opcode.eq(DRSOpcode.MEM_DATA),
            drs_merge.b.payload.tag.eq(rc.tag),
            drs_merge.b.payload.poison.eq(mr.payload.poison | mr.payload.err),
            drs_merge.b.payload.data.eq(mr.payload.data),
        ]
        drs = self.s2m_drs
        m.d.comb += [drs.valid.eq(drs_merge.o.valid), drs_merge.o.ready.eq(drs.ready),
                     drs.payload.hdr.opcode.eq(drs_merge.o.payload.opcode),
                     drs.payload.hdr.tag.eq(drs_merge.o.payload.tag),
                     drs.payload.hdr.poison.eq(drs_merge.o.payload.poison),
                     drs.payload.hdr.meta_field.eq(MetaField.NO_OP),
                     drs.payload.hdr.dev_load.eq(self._stable_load(m, drs, dev_load, "drs")),
                     drs.payload.data.eq(drs_merge.o.payload.data)]
