"""DCOH: CXL.mem (HDM-DB) device coherency engine between the host, the engines and the media.

Contract: docs/coherence.md (message table, regions, blocking, errors). Structure:

- **Host lane** (:class:`~.host_lane.HostLane`, one message per cycle, two stages: select,
  then decide): BIRsp, then RwD, then a parked Req that a BIRsp woke, then a new Req; each
  Req's action from :class:`~.decode.ReqDecode`. It alone writes
  the snoop filter, frees BITags and answers the host (NDR via one in-order FIFO, DRS for
  NXM/refused reads), and issues host media reads/writes.
- **Device read lane** and **device write lane** (:class:`~.device_lanes.DeviceLanes`, one
  request each per cycle): the engines' device request port. They only read the snoop filter;
  when the host may hold the line they allocate a BITag and send a BISnp, and retry until the
  snoop filter allows the access.
- **Media side** (:class:`~.routing.MediaRouting`): media reads of the host lane and the device
  read lane are merged round-robin onto ``mem``; writes of both lanes enter one queue in
  service order (a host write first, a device write that lost the slot in the next cycle), so
  same-line writes reach the media in service order. A context FIFO per direction (pushed in
  ``mem`` request order) routes the responses back: host read → DRS MemData, host write → NDR
  Cmp, device → ``dev`` by id.
- **Stores**: :class:`~.snoop_filter.SnoopFilter` (the host lane's lookup read a cycle ahead
  through synchronous read ports, the device lanes' asynchronously), the BITag tracker
  :class:`~.tracker.BITracker`, the write buckets (:mod:`.hazards`). Poison is no store of the
  DCOH: a host write's poison bit goes to the media with the write, and the media's poison bit
  of a line comes back with each read (docs/coherence.md, "Poison").

Requirements on ``mem`` (MediaAXI meets them: one AXI ID): read responses return in read-request
order and write responses in write-request order, across ids.

Latency: host read = media read latency + 7 cycles with the PMEM model (the host lane's
decision register, lane FIFO, media port, DRS; docs/coherence.md), measured in ``make bench``.
Error report: ``err`` pulses one cycle with ``err_code`` (DcohError) and ``err_addr`` (line
address). In-RTL assertions check rules 2, 3, 5 and tracker soundness.

``observe=True`` adds ports for the formal harness (hw/formal): ``obs_line`` in,
``obs_sf_state``, ``obs_bisnp_pending``, ``obs_req_served``/``obs_req_served_line``,
``obs_trk_valid`` out.
"""
from amaranth.hdl import Module, Signal, Assert, Cat, Mux
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..counting import step
from ..cxl.messages import host_channel_members
from ..cxl_encodings import BISnpOpcode, DcohError, HOST_MEDIA_ID
from ..reqport import DeviceRequestSignature, RD_OWN
from .device_lanes import DeviceLanes
from .host_lane import HostLane
from .snoop_filter import SnoopFilter, SF_I, SF_A
from .tracker import BITracker
from .hazards import WriteBuckets
from .routing import (MediaRouting, LANE_FIFO, host_read_layout, device_read_layout,
                      write_layout, ndr_entry_layout)

__all__ = ["DCOH", "STATUS_PORTS", "status_members", "forward_status"]

# status outputs of the DCOH that a top forwards as its own ports
STATUS_PORTS = ("ready", "err", "err_code", "err_addr", "bisnp_sent", "conflicts",
                "proto_errors")


def status_members(addr_bits) -> dict:
    """The DCOH's status outputs as component members (``ready``, error report, counters)."""
    return {"ready": Out(1), "err": Out(1), "err_code": Out(4), "err_addr": Out(addr_bits - 6),
            "bisnp_sent": Out(32), "conflicts": Out(32), "proto_errors": Out(32)}


def forward_status(m, outer, dcoh):
    """Drive ``outer``'s status ports (made with :func:`status_members`) from ``dcoh``'s."""
    for name in STATUS_PORTS:
        m.d.comb += getattr(outer, name).eq(getattr(dcoh, name))


class DCOH(wiring.Component):
    """CXL.mem (HDM-DB) device coherency engine between the host, the engines and the media.

    Contract: docs/coherence.md; structure, ordering and latency in the module docstring. The host
    lane serves one host message per cycle (BIRsp, then RwD, then a parked Req that a BIRsp woke,
    then a new Req); the device read and write lanes one engine request each per cycle, snooping
    the host (BISnp) when the snoop filter says it may hold the line.

    Parameters
    ----------
    cfg : DeviceConfig
        Regions, snoop filter (``sf_sets``, ``sf_ways``), BITags (``bi_tags``), write buckets,
        lane depths, ``addr_bits``.
    observe : bool
        Add the formal harness's observation ports (``obs_*``).

    Members
    -------
    m2s_req, m2s_rwd, m2s_birsp : In(stream.Signature(...))
        Host to device CXL.mem channels (``hw.cxl.messages``).
    s2m_ndr, s2m_drs, s2m_bisnp : Out(stream.Signature(...))
        Device to host channels.
    dev : In(DeviceRequestSignature(cfg.addr_bits))
        The engines' device request port (responder side).
    mem : Out(DeviceRequestSignature(cfg.addr_bits, poison=True))
        Media requests; read responses must return in read-request order and write responses in
        write-request order, across ids (MediaAXI meets this). ``wr_req.poison``: a host write
        with poison; ``rd_resp.poison``: the media holds the line as poisoned (host read →
        MemData poison 1, device read → ``err``).
    ready : Out(1)
        The snoop filter and write-bucket init sweeps are done.
    err : Out(1), err_code : Out(4), err_addr : Out(cfg.addr_bits - 6)
        One-cycle error report (``DcohError``, line address).
    bisnp_sent, conflicts, proto_errors : Out(32)
        Counters.
    obs_line : In; obs_sf_state, obs_bisnp_pending, obs_req_served, obs_req_served_line,
    obs_trk_valid : Out
        With ``observe`` only.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig = DeviceConfig(), *, observe=False):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        self._observe = observe
        ab = cfg.addr_bits
        lb = ab - 6
        ports = {
            **host_channel_members(),
            "dev": In(DeviceRequestSignature(ab)),
            "mem": Out(DeviceRequestSignature(ab, poison=True)),
            **status_members(ab),
        }
        if observe:
            ports.update({"obs_line": In(lb), "obs_sf_state": Out(2), "obs_bisnp_pending": Out(1),
                          "obs_req_served": Out(1), "obs_req_served_line": Out(lb),
                          "obs_trk_valid": Out(cfg.bi_tags)})
        super().__init__(ports)


    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        ab = cfg.addr_bits
        lb = ab - 6
        n_ways = cfg.sf_ways

        # ---------------------------------------------------------------- stores
        m.submodules.sf = sf = SnoopFilter(sets=cfg.sf_sets, ways=n_ways, line_bits=lb,
                                           n_lookup=4 if self._observe else 3, registered=(0,))
        lk_h, lk_dr, lk_dw = sf.lk[0], sf.lk[1], sf.lk[2]
        n_cam = 3 + n_ways + (1 if self._observe else 0)
        m.submodules.trk = trk = BITracker(n=cfg.bi_tags, line_bits=lb, n_cam=n_cam)
        cam_h, cam_dr, cam_dw = trk.cam[0], trk.cam[1], trk.cam[2]
        cam_way = [trk.cam[3 + w] for w in range(n_ways)]
        wr_cap = cfg.max_writes + 4 * LANE_FIFO
        # in-flight media writes, hashed: host reads wait on both, device reads on host writes
        # (a device read after a served host write-back must see it; the engines order their own
        # writes and reads themselves)
        m.submodules.host_wb = host_wb = WriteBuckets(n=cfg.wr_buckets, max_count=wr_cap,
                                                      line_bits=lb, n_query=2)
        m.submodules.dev_wb = dev_wb = WriteBuckets(n=cfg.wr_buckets, max_count=wr_cap,
                                                    line_bits=lb, n_query=1)


        # ---------------------------------------------------------------- lane output FIFOs
        h_rd_l, d_rd_l = host_read_layout(lb), device_read_layout(lb)
        # one write queue for both lanes, filled in service order: two writes to a line reach
        # the media in the order the DCOH served them (the media port keeps write order)
        wr_l, ndr_l = write_layout(lb), ndr_entry_layout()
        m.submodules.h_rd = h_rd = fifo.SyncFIFOBuffered(width=h_rd_l.size, depth=LANE_FIFO)
        m.submodules.d_rd = d_rd = fifo.SyncFIFOBuffered(width=d_rd_l.size, depth=LANE_FIFO)
        m.submodules.wr_q = wr_q = fifo.SyncFIFOBuffered(width=wr_l.size, depth=LANE_FIFO)
        m.submodules.ndr_h = ndr_h = fifo.SyncFIFOBuffered(width=ndr_l.size, depth=4)
        m.submodules.drs_nxm = drs_nxm = fifo.SyncFIFOBuffered(width=16, depth=LANE_FIFO)
        bisnp_l = data.StructLayout({"opcode": 4, "tag": 12, "line": lb})
        m.submodules.bisnp = bisnp_q = fifo.SyncFIFOBuffered(width=bisnp_l.size,
                                                              depth=max(LANE_FIFO, cfg.bi_tags))

        # ---------------------------------------------------------------- counters
        host_rd_inflight = Signal(range(cfg.host_reads + 1))
        host_wr_inflight = Signal(range(cfg.host_writes + 1))
        host_rd_inc, host_rd_dec = Signal(), Signal()
        host_wr_inc, host_wr_dec = Signal(), Signal()
        step(m, host_rd_inflight, up=host_rd_inc, down=host_rd_dec)
        step(m, host_wr_inflight, up=host_wr_inc, down=host_wr_dec)

        # ================================================================ host lane
        m.submodules.host = host = HostLane(cfg)
        dw_turn = Signal()    # the device write lost the write slot to the host last cycle
        for ch in ("m2s_req", "m2s_rwd", "m2s_birsp"):
            wiring.connect(m, wiring.flipped(getattr(self, ch)), getattr(host, ch))
        wiring.connect(m, host.lk, lk_h)
        wiring.connect(m, host.lk_next, sf.lk_next[0])
        wiring.connect(m, host.cam, cam_h)
        for w in range(n_ways):
            wiring.connect(m, host.cam_way[w], cam_way[w])
        ready = Signal()
        m.d.comb += [ready.eq(sf.ready & host_wb.ready & dev_wb.ready), self.ready.eq(ready)]
        ev_line, ev_valid, h_do = host.line, host.valid, host.do
        m.d.comb += [
            host.stores_ready.eq(ready),
            host_wb.q[0].line.eq(ev_line), dev_wb.q[0].line.eq(ev_line),
            host.wr_inflight.eq(host_wb.q[0].busy | dev_wb.q[0].busy),
            trk.q_idx.eq(self.m2s_birsp.payload.hdr.bi_tag),
            host.tag_q_valid.eq(trk.q_valid), host.tag_q_op.eq(trk.q_op),
            host.tag_q_line.eq(trk.q_line), host.tags_full.eq(trk.full),
            host.ndr_room.eq(ndr_h.w_rdy), host.drs_room.eq(drs_nxm.w_rdy),
            host.rd_room.eq(h_rd.w_rdy), host.wq_room.eq(wr_q.w_rdy),
            host.rd_slot.eq(host_rd_inflight < cfg.host_reads),
            host.wr_slot.eq(host_wr_inflight < cfg.host_writes),
            host.dw_turn.eq(dw_turn),
        ]
        h_media_wr = host.media_wr
        h_alloc = host.alloc
        # its effects on the stores and queues
        m.d.comb += [
            sf.wr_en.eq(h_do & host.sf_we), sf.wr_line.eq(ev_line), sf.wr_way.eq(host.sf_way),
            sf.wr_state.eq(host.sf_state),
            ndr_h.w_en.eq(h_do & host.ndr),
            ndr_h.w_data.eq(Cat(host.ndr_op, host.tag)),
            drs_nxm.w_en.eq(h_do & host.drs_nxm),
            drs_nxm.w_data.eq(host.tag),
            h_rd.w_en.eq(h_do & host.media_rd),
            h_rd.w_data.eq(Cat(ev_line, host.tag)),
            host_rd_inc.eq(h_do & host.media_rd),
            host_wr_inc.eq(h_do & h_media_wr),
            host_wb.inc.en.eq(h_do & h_media_wr),
            host_wb.inc.line.eq(ev_line),
            trk.rel_en.eq(h_do & host.tag_release),
            trk.rel_idx.eq(host.bi_tag),
        ]

        # ================================================================ device lanes
        dr, dw = self.dev.rd_req, self.dev.wr_req
        dr_line, dw_line = dr.payload.addr, dw.payload.addr
        m.d.comb += [lk_dr.line.eq(dr_line), cam_dr.line.eq(dr_line),
                     host_wb.q[1].line.eq(dr_line), lk_dw.line.eq(dw_line),
                     cam_dw.line.eq(dw_line)]
        m.submodules.dev_lanes = lanes = DeviceLanes(line_bits=lb)
        m.d.comb += [
            lanes.rd_line.eq(dr_line), lanes.rd_valid.eq(dr.valid),
            lanes.rd_own.eq(dr.payload.op == RD_OWN),
            lanes.wr_line.eq(dw_line), lanes.wr_valid.eq(dw.valid),
            lanes.rd_sf_state.eq(lk_dr.state), lanes.wr_sf_state.eq(lk_dw.state),
            lanes.rd_bisnp.eq(cam_dr.hit), lanes.wr_bisnp.eq(cam_dw.hit),
            lanes.rd_host_write.eq(host_wb.q[1].busy),
            lanes.ready.eq(ready), lanes.host_valid.eq(ev_valid), lanes.host_line.eq(ev_line),
            lanes.host_alloc.eq(h_do & h_alloc), lanes.host_write.eq(h_do & h_media_wr),
            lanes.tags_full.eq(trk.full), lanes.rd_room.eq(d_rd.w_rdy),
            lanes.wr_room.eq(wr_q.w_rdy),
            dw_turn.eq(lanes.wr_turn),
        ]
        dr_go, dw_go = lanes.rd_go, lanes.wr_go
        dr_alloc, dw_alloc = lanes.rd_alloc, lanes.wr_alloc
        m.d.comb += [
            dr.ready.eq(dr_go), dw.ready.eq(dw_go),
            d_rd.w_en.eq(dr_go),
            d_rd.w_data.eq(Cat(dr.payload.id, dr.payload.op, dr_line)),
            dev_wb.inc.en.eq(dw_go),
            dev_wb.inc.line.eq(dw_line),
        ]

        # ---- write queue: the host lane's write, else the device write lane's; a device write
        # that lost the slot to a host write gets the next cycle (the lanes' wr_turn holds host
        # writes back for one cycle)
        wq_in = Signal(wr_l)
        with m.If(h_do & h_media_wr):
            m.d.comb += [wq_in.id.eq(HOST_MEDIA_ID), wq_in.line.eq(ev_line),
                         wq_in.be.eq(host.wr_be), wq_in.data.eq(host.wr_data),
                         wq_in.host.eq(1), wq_in.tag.eq(host.tag),
                         wq_in.poison.eq(host.wr_poison)]
        with m.Else():
            m.d.comb += [wq_in.id.eq(dw.payload.id), wq_in.line.eq(dw_line),
                         wq_in.be.eq(dw.payload.be), wq_in.data.eq(dw.payload.data)]
        m.d.comb += [wr_q.w_en.eq((h_do & h_media_wr) | dw_go), wr_q.w_data.eq(wq_in)]

        # ---- BITag allocation (one per cycle: host lane, then device read, then device write)
        alloc_line = Signal(lb)
        alloc_op = Signal(4)
        with m.If(h_do & h_alloc):
            m.d.comb += [alloc_line.eq(host.victim), alloc_op.eq(BISnpOpcode.BISNP_INV)]
        with m.Elif(dr_alloc):
            m.d.comb += [alloc_line.eq(dr_line),
                         alloc_op.eq(Mux(dr.payload.op == RD_OWN, BISnpOpcode.BISNP_INV,
                                         BISnpOpcode.BISNP_DATA))]
        with m.Else():
            m.d.comb += [alloc_line.eq(dw_line), alloc_op.eq(BISnpOpcode.BISNP_INV)]
        any_alloc = (h_do & h_alloc) | dr_alloc | dw_alloc
        m.d.comb += [trk.alloc_en.eq(any_alloc), trk.alloc_line.eq(alloc_line),
                     trk.alloc_op.eq(alloc_op),
                     bisnp_q.w_en.eq(any_alloc)]
        bs_in = Signal(bisnp_l)
        m.d.comb += [bs_in.opcode.eq(alloc_op), bs_in.tag.eq(trk.free_idx),
                     bs_in.line.eq(alloc_line), bisnp_q.w_data.eq(bs_in)]
        bs = Signal(bisnp_l)
        m.d.comb += [bs.eq(bisnp_q.r_data),
                     self.s2m_bisnp.valid.eq(bisnp_q.r_rdy),
                     bisnp_q.r_en.eq(self.s2m_bisnp.ready),
                     self.s2m_bisnp.payload.hdr.opcode.eq(bs.opcode),
                     self.s2m_bisnp.payload.hdr.bi_tag.eq(bs.tag),
                     self.s2m_bisnp.payload.hdr.addr.eq(bs.line)]

        # ================================================================ media side
        m.submodules.routing = routing = MediaRouting(cfg)
        wiring.connect(m, h_rd.r_stream, routing.host_rd)
        wiring.connect(m, d_rd.r_stream, routing.dev_rd)
        wiring.connect(m, wr_q.r_stream, routing.wr)
        wiring.connect(m, ndr_h.r_stream, routing.host_ndr)
        wiring.connect(m, drs_nxm.r_stream, routing.drs_nxm)
        wiring.connect(m, routing.mem, wiring.flipped(self.mem))
        wiring.connect(m, routing.dev_rd_resp, wiring.flipped(self.dev.rd_resp))
        wiring.connect(m, routing.dev_wr_resp, wiring.flipped(self.dev.wr_resp))
        wiring.connect(m, routing.s2m_ndr, wiring.flipped(self.s2m_ndr))
        wiring.connect(m, routing.s2m_drs, wiring.flipped(self.s2m_drs))
        m.d.comb += [
            routing.host_rd_inflight.eq(host_rd_inflight),
            host_rd_dec.eq(routing.host_rd_done),
            host_wr_dec.eq(routing.host_wr_done),
            host_wb.dec.en.eq(routing.host_wr_done),
            host_wb.dec.line.eq(routing.wr_done_bucket),
            dev_wb.dec.en.eq(routing.dev_wr_done),
            dev_wb.dec.line.eq(routing.wr_done_bucket),
        ]

        # ================================================================ errors, counters
        media_err = routing.media_err
        m.d.sync += self.err.eq(0)
        h_err = host.err
        with m.If(h_do & (h_err != DcohError.NONE)):
            m.d.sync += [self.err.eq(1), self.err_code.eq(h_err), self.err_addr.eq(ev_line)]
        with m.Elif(media_err):
            m.d.sync += [self.err.eq(1), self.err_code.eq(DcohError.MEDIA)]
        proto = h_do & ((h_err == DcohError.ILLEGAL_REQ) | (h_err == DcohError.ILLEGAL_RWD) |
                        (h_err == DcohError.BIRSP_TAG) | (h_err == DcohError.BIRSP_KIND) |
                        (h_err == DcohError.SF_MISS_OWNED))
        step(m, self.bisnp_sent, up=any_alloc)
        step(m, self.conflicts, up=h_do & host.conflict)
        step(m, self.proto_errors, up=proto)

        # ================================================================ assertions
        # (the host lane asserts rule 5 and free-way allocation itself)
        served_req = host.served_req
        m.d.sync += [
            # rule 2: a device write only to a line the SF says I, no BISnp outstanding
            Assert(~dw_go | ((lk_dw.state == SF_I) & ~cam_dw.hit), "DCOH: device write to a "
                   "line the host may hold"),
            # rule 3: a device read only when SF is I or S (I for RdOwn)
            Assert(~dr_go | (lk_dr.state != SF_A), "DCOH: device read of an owned line"),
        ]

        # payloads read zero while not valid: FIFO memories start undefined in four-state
        # simulators (Icarus), and a defined boundary keeps traces comparable across simulators
        # (the media side zeroes its own outputs)
        with m.If(~self.s2m_bisnp.valid):
            m.d.comb += self.s2m_bisnp.payload.eq(0)

        if self._observe:
            lk_o = sf.lk[3]
            cam_o = trk.cam[3 + n_ways]
            m.d.comb += [lk_o.line.eq(self.obs_line), self.obs_sf_state.eq(lk_o.state),
                         cam_o.line.eq(self.obs_line), self.obs_bisnp_pending.eq(cam_o.hit),
                         self.obs_req_served.eq(served_req),
                         self.obs_req_served_line.eq(ev_line),
                         self.obs_trk_valid.eq(trk.valid)]
        return m
