"""DCOH: CXL.mem (HDM-DB) device coherency engine between the host, the engines and the media.

Contract: docs/coherence.md (message table, regions, blocking, errors). Structure:

- **Host lane** (one message per cycle; here): BIRsp, then RwD, then a parked Req that a BIRsp
  woke, then a new Req; each Req's action from :class:`~.decode.ReqDecode`. It alone writes
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
- **Stores**: :class:`~.snoop_filter.SnoopFilter`, the BITag tracker
  :class:`~.tracker.BITracker`, the write buckets and poison table (:mod:`.hazards`).

Requirements on ``mem`` (MediaAXI meets them: one AXI ID): read responses return in read-request
order and write responses in write-request order, across ids.

Latency: host read = media read latency + 4 cycles (lane FIFO, merge, media adapter, DRS),
measured in ``make bench``. Error report: ``err`` pulses one cycle with ``err_code``
(DcohError) and ``err_addr`` (line address). In-RTL assertions check rules 2, 3, 5 and tracker
soundness.

``observe=True`` adds ports for the formal harness (hw/formal): ``obs_line`` in,
``obs_sf_state``, ``obs_bisnp_pending``, ``obs_req_served``/``obs_req_served_line``,
``obs_trk_valid`` out.
"""
from amaranth.hdl import Module, Signal, Assert, Cat, Mux
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig, REGIONS
from ..cxl.messages import host_channel_members
from ..cxl_encodings import (RwDOpcode, BIRspOpcode, BISnpOpcode, NDROpcode,
                             MetaField, MetaValue, SnpType, DcohError, HOST_MEDIA_ID)
from ..reqport import DeviceRequestSignature, RD_OWN
from .decode import (ReqDecode, A_SPEC, A_ERR_RD, A_ERR_ND, A_RDCUR, A_RD_S, A_RD_A, A_INV_A,
                     A_INV_I)
from .device_lanes import DeviceLanes
from .snoop_filter import SnoopFilter, SF_I, SF_S, SF_A
from .tracker import BITracker
from .hazards import WriteBuckets, PoisonTable
from .routing import (MediaRouting, LANE_FIFO, host_read_layout, device_read_layout,
                      write_layout, ndr_entry_layout)

__all__ = ["DCOH", "STATUS_PORTS", "status_members", "forward_status"]

ALL_BE = (1 << 64) - 1

# host lane event sources
SRC_NONE, SRC_BIRSP, SRC_RWD, SRC_PARK, SRC_REQ = range(5)


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
        poison table, lane depths, ``addr_bits``.
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
    mem : Out(DeviceRequestSignature(cfg.addr_bits))
        Media requests; read responses must return in read-request order and write responses in
        write-request order, across ids (MediaAXI meets this).
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
            "mem": Out(DeviceRequestSignature(ab)),
            **status_members(ab),
        }
        if observe:
            ports.update({"obs_line": In(lb), "obs_sf_state": Out(2), "obs_bisnp_pending": Out(1),
                          "obs_req_served": Out(1), "obs_req_served_line": Out(lb),
                          "obs_trk_valid": Out(cfg.bi_tags)})
        super().__init__(ports)

    # ------------------------------------------------------------------ helpers

    def _region(self, m, line, name):
        """One-hot region flags of a line address (``rw``, ``ro``, ``log``; none = NXM)."""
        cfg = self.cfg
        flags = {}
        for r in REGIONS:
            lo = getattr(cfg, r + "_base") >> 6
            hi = (getattr(cfg, r + "_base") + getattr(cfg, r + "_size")) >> 6
            s = Signal(name=f"{name}_in_{r}")
            # (a bound at 0 or at the top of the address space is left out: Verilator flags an
            # always-true unsigned compare)
            lo_ok = (line >= lo) if lo > 0 else 1
            hi_ok = (line < hi) if hi < (1 << len(line)) else 1
            m.d.comb += s.eq(lo_ok & hi_ok)
            flags[r] = s
        return (flags["table"] | flags["staging"], flags["superblock"] | flags["slots"],
                flags["log"])

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        ab = cfg.addr_bits
        lb = ab - 6
        n_ways = cfg.sf_ways

        # ---------------------------------------------------------------- stores
        m.submodules.sf = sf = SnoopFilter(sets=cfg.sf_sets, ways=n_ways, line_bits=lb,
                                           n_lookup=4 if self._observe else 3)
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
        m.submodules.poison = poison = PoisonTable(n=cfg.poison_lines, line_bits=lb,
                                                   n_query=2, n_clr=2)


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
        m.d.sync += [host_rd_inflight.eq(host_rd_inflight + host_rd_inc - host_rd_dec),
                     host_wr_inflight.eq(host_wr_inflight + host_wr_inc - host_wr_dec)]

        # ================================================================ host lane
        req, rwd, birsp = self.m2s_req, self.m2s_rwd, self.m2s_birsp
        P = cfg.park_slots
        pk_valid = Signal(P)
        pk_ready = Signal(P)
        pk_l = data.StructLayout({"opcode": 4, "snp": 3, "mf": 2, "mv": 2, "tag": 16,
                                  "line": lb, "hi_bad": 1})
        pk = [Signal(pk_l, name=f"park{i}") for i in range(P)]
        pk_sel = Signal(range(P))
        pk_any_ready = Signal()
        for i in reversed(range(P)):
            with m.If(pk_valid[i] & pk_ready[i]):
                m.d.comb += [pk_sel.eq(i), pk_any_ready.eq(1)]
        pk_free = Signal(range(P))
        pk_full = Signal()
        m.d.comb += pk_full.eq(pk_valid.all())
        for i in reversed(range(P)):
            with m.If(~pk_valid[i]):
                m.d.comb += pk_free.eq(i)

        # event selection
        src = Signal(range(5))
        ev = Signal(pk_l)            # Req-shaped view of the event (Req, parked Req, RwD)
        ready = Signal()
        m.d.comb += [ready.eq(sf.ready & host_wb.ready & dev_wb.ready), self.ready.eq(ready)]
        with m.If(~ready):
            m.d.comb += src.eq(SRC_NONE)
        with m.Elif(birsp.valid):
            m.d.comb += src.eq(SRC_BIRSP)
        with m.Elif(rwd.valid):
            m.d.comb += src.eq(SRC_RWD)
        with m.Elif(pk_any_ready):
            m.d.comb += src.eq(SRC_PARK)
        with m.Elif(req.valid):
            m.d.comb += src.eq(SRC_REQ)

        def hdr_view(h):
            return [ev.opcode.eq(h.opcode), ev.snp.eq(h.snp_type), ev.mf.eq(h.meta_field),
                    ev.mv.eq(h.meta_value), ev.tag.eq(h.tag), ev.line.eq(h.addr[:lb]),
                    ev.hi_bad.eq(h.addr[lb:] != 0)]

        m.d.comb += trk.q_idx.eq(birsp.payload.hdr.bi_tag)
        with m.Switch(src):
            with m.Case(SRC_BIRSP):
                m.d.comb += [ev.line.eq(trk.q_line), ev.opcode.eq(birsp.payload.hdr.opcode)]
            with m.Case(SRC_RWD):
                m.d.comb += hdr_view(rwd.payload.hdr)
            with m.Case(SRC_PARK):
                for i in range(P):
                    with m.If(pk_sel == i):
                        m.d.comb += ev.eq(pk[i])
            with m.Case(SRC_REQ):
                m.d.comb += hdr_view(req.payload.hdr)
        ev_valid = Signal()
        m.d.comb += ev_valid.eq(src != SRC_NONE)

        # lookups on the event line
        m.d.comb += [lk_h.line.eq(ev.line), cam_h.line.eq(ev.line), host_wb.q[0].line.eq(ev.line),
                     dev_wb.q[0].line.eq(ev.line), poison.q[0].line.eq(ev.line)]
        ev_wr_inflight = host_wb.q[0].busy | dev_wb.q[0].busy
        ev_rw, ev_ro, ev_log = self._region(m, ev.line, "ev")
        ev_nxm = Signal()
        m.d.comb += ev_nxm.eq(ev.hi_bad | ~(ev_rw | ev_ro | ev_log))
        ev_bisnp_pending = cam_h.hit
        ev_parked = Signal()
        m.d.comb += ev_parked.eq(Cat(pk_valid[i] & (pk[i].line == ev.line) for i in range(P)).any())

        # ---- Req decode
        m.submodules.decode = dec = ReqDecode()
        m.d.comb += [dec.opcode.eq(ev.opcode), dec.snp.eq(ev.snp), dec.mf.eq(ev.mf),
                     dec.mv.eq(ev.mv), dec.rw.eq(ev_rw), dec.ro.eq(ev_ro), dec.nxm.eq(ev_nxm)]
        act, act_err = dec.act, dec.err
        meta0 = ev.mf == MetaField.META0_STATE

        needs_media_rd = (act == A_RDCUR) | (act == A_RD_S) | (act == A_RD_A)
        needs_entry = (act == A_RD_S) | (act == A_RD_A) | (act == A_INV_A)
        new_state = Signal(2)
        m.d.comb += new_state.eq(Mux(act == A_RD_S, SF_S, SF_A))

        # victim selection: first way, rotating, whose line has no BISnp outstanding
        vic_ptr = Signal(range(n_ways))
        vic_ok = Signal()
        vic_way = Signal(range(n_ways))
        elig = Signal(n_ways)
        for w in range(n_ways):
            m.d.comb += [cam_way[w].line.eq(lk_h.way_line[w]),
                         elig[w].eq((lk_h.way_state[w] != SF_I) & ~cam_way[w].hit)]
        with m.Switch(vic_ptr):
            for p in range(n_ways):
                with m.Case(p):
                    for k in reversed(range(n_ways)):
                        w = (p + k) % n_ways
                        with m.If(elig[w]):
                            m.d.comb += [vic_ok.eq(1), vic_way.eq(w)]
        vic_line = Signal(lb)
        with m.Switch(vic_way):
            for w in range(n_ways):
                with m.Case(w):
                    m.d.comb += vic_line.eq(lk_h.way_line[w])

        # ---- host lane decision: what this cycle does (fire = event consumed)
        h_fire = Signal()
        h_park = Signal()            # Req goes to (or back to) a park slot
        h_served = Signal()          # Req answered (incl. errors), SF updated
        h_alloc = Signal()           # BITag allocation for a victim
        h_sf_we = Signal()
        h_sf_way = Signal(range(n_ways))
        h_sf_state = Signal(2)
        h_err = Signal(4)
        h_ndr = Signal()
        h_ndr_op = Signal(3)
        h_drs_nxm = Signal()
        h_media_rd = Signal()
        h_media_wr = Signal()
        h_poison_set = Signal()
        h_poison_clr = Signal()
        h_wake = Signal()            # a BIRsp was processed: parked Reqs retry
        h_trk_rel = Signal()
        h_conflict = Signal()

        ndr_room = ndr_h.w_rdy
        dw_turn = Signal()    # the device write lost the write slot to the host last cycle
        is_req = (src == SRC_REQ) | (src == SRC_PARK)
        can_park = (src == SRC_PARK) | ~pk_full

        with m.If(is_req):
            blocked = (act != A_SPEC) & (ev_bisnp_pending | ((src == SRC_REQ) & ev_parked))
            with m.If(blocked):
                m.d.comb += [h_fire.eq(can_park), h_park.eq(1)]
            with m.Elif(act == A_SPEC):
                m.d.comb += h_fire.eq(1)
            with m.Elif(act == A_ERR_RD):
                m.d.comb += [h_fire.eq(drs_nxm.w_rdy), h_drs_nxm.eq(1), h_served.eq(1),
                             h_err.eq(act_err)]
            with m.Elif(act == A_ERR_ND):
                m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1), h_ndr_op.eq(NDROpcode.CMP),
                             h_served.eq(1), h_err.eq(act_err)]
            with m.Else():
                rd_ok = ~needs_media_rd | (h_rd.w_rdy & ~ev_wr_inflight &
                                           (host_rd_inflight < cfg.host_reads))
                res_ok = ndr_room & rd_ok
                with m.If(needs_entry & ~lk_h.hit & ~lk_h.free):
                    # full set: BISnpInv a victim, park until a BIRsp frees a way
                    with m.If(vic_ok):
                        m.d.comb += [h_fire.eq(can_park & ~trk.full), h_alloc.eq(1),
                                     h_park.eq(1)]
                    with m.Else():
                        m.d.comb += [h_fire.eq(can_park), h_park.eq(1)]
                with m.Else():
                    m.d.comb += [h_fire.eq(res_ok), h_served.eq(1), h_ndr.eq(1),
                                 h_media_rd.eq(needs_media_rd)]
                    with m.Switch(act):
                        with m.Case(A_RDCUR):
                            m.d.comb += h_ndr_op.eq(NDROpcode.CMP)
                        with m.Case(A_RD_S):
                            m.d.comb += h_ndr_op.eq(NDROpcode.CMP_S)
                        with m.Case(A_RD_A, A_INV_A):
                            m.d.comb += h_ndr_op.eq(NDROpcode.CMP_E)
                        with m.Case(A_INV_I):
                            m.d.comb += h_ndr_op.eq(NDROpcode.CMP)
                    with m.If(needs_entry):
                        m.d.comb += [h_sf_we.eq(1), h_sf_state.eq(new_state),
                                     h_sf_way.eq(Mux(lk_h.hit, lk_h.way, lk_h.free_way))]
                    with m.Elif((act == A_INV_I) & lk_h.hit):
                        m.d.comb += [h_sf_we.eq(1), h_sf_state.eq(SF_I), h_sf_way.eq(lk_h.way)]

        with m.Elif(src == SRC_RWD):
            hdr = rwd.payload.hdr
            with m.If(hdr.opcode == RwDOpcode.BI_CONFLICT):
                m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1),
                             h_ndr_op.eq(NDROpcode.BI_CONFLICT_ACK), h_conflict.eq(1)]
            with m.Else():
                is_wr = (hdr.opcode == RwDOpcode.MEM_WR) | (hdr.opcode == RwDOpcode.MEM_WR_PTL)
                meta_ok = (ev.mf == MetaField.NO_OP) | (meta0 & (
                    (ev.mv == MetaValue.I) | (ev.mv == MetaValue.A) | (ev.mv == MetaValue.S)))
                legal_wr = is_wr & (ev.snp == SnpType.NO_OP) & meta_ok
                drop_poison = hdr.poison & poison.full
                with m.If(~legal_wr | ev_nxm | ~ev_rw | drop_poison):
                    m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1), h_ndr_op.eq(NDROpcode.CMP)]
                    with m.If(~legal_wr):
                        m.d.comb += h_err.eq(DcohError.ILLEGAL_RWD)
                    with m.Elif(ev_nxm):
                        m.d.comb += h_err.eq(DcohError.NXM)
                    with m.Elif(~ev_rw):
                        m.d.comb += h_err.eq(DcohError.REFUSED)
                    with m.Else():
                        m.d.comb += h_err.eq(DcohError.POISON_FULL)
                with m.Else():
                    full_line = (hdr.opcode == RwDOpcode.MEM_WR) | (rwd.payload.be == ALL_BE)
                    m.d.comb += [h_fire.eq(wr_q.w_rdy & ~dw_turn &
                                           (host_wr_inflight < cfg.host_writes)),
                                 h_media_wr.eq(1), h_poison_set.eq(hdr.poison),
                                 h_poison_clr.eq(~hdr.poison & full_line)]
                    with m.If(meta0):
                        with m.If(lk_h.hit):
                            m.d.comb += [h_sf_we.eq(1), h_sf_way.eq(lk_h.way),
                                         h_sf_state.eq(Mux(ev.mv == MetaValue.I, SF_I,
                                                           Mux(ev.mv == MetaValue.S, SF_S, SF_A)))]
                        with m.Elif(ev.mv != MetaValue.I):
                            m.d.comb += h_err.eq(DcohError.SF_MISS_OWNED)

        with m.Elif(src == SRC_BIRSP):
            op = birsp.payload.hdr.opcode
            m.d.comb += h_fire.eq(1)
            with m.If(~trk.q_valid):
                m.d.comb += h_err.eq(DcohError.BIRSP_TAG)
            with m.Else():
                rsp_state = Signal(2)
                with m.Switch(op[:2]):
                    with m.Case(0b01):
                        m.d.comb += rsp_state.eq(SF_S)
                    with m.Case(0b10):
                        m.d.comb += rsp_state.eq(SF_A)
                    with m.Default():
                        m.d.comb += rsp_state.eq(SF_I)
                allowed = Signal()
                with m.Switch(trk.q_op):
                    with m.Case(BISnpOpcode.BISNP_INV):
                        m.d.comb += allowed.eq(op == BIRspOpcode.BIRSP_I)
                    with m.Case(BISnpOpcode.BISNP_DATA):
                        m.d.comb += allowed.eq((op == BIRspOpcode.BIRSP_I) |
                                               (op == BIRspOpcode.BIRSP_S))
                    with m.Case(BISnpOpcode.BISNP_CUR):
                        m.d.comb += allowed.eq((op == BIRspOpcode.BIRSP_I) |
                                               (op == BIRspOpcode.BIRSP_S) |
                                               (op == BIRspOpcode.BIRSP_E))
                with m.If(~allowed):
                    m.d.comb += h_err.eq(DcohError.BIRSP_KIND)
                m.d.comb += [h_trk_rel.eq(1), h_wake.eq(1)]
                with m.If(lk_h.hit):
                    m.d.comb += [h_sf_we.eq(1), h_sf_way.eq(lk_h.way), h_sf_state.eq(rsp_state)]

        # ---- host lane effects
        m.d.comb += [req.ready.eq(h_fire & (src == SRC_REQ)),
                     rwd.ready.eq(h_fire & (src == SRC_RWD)),
                     birsp.ready.eq(h_fire & (src == SRC_BIRSP))]
        h_do = Signal()
        m.d.comb += h_do.eq(h_fire & ev_valid)
        # snoop filter write
        m.d.comb += [sf.wr_en.eq(h_do & h_sf_we), sf.wr_line.eq(ev.line), sf.wr_way.eq(h_sf_way),
                     sf.wr_state.eq(h_sf_state)]
        # park slots
        with m.If(h_do & h_wake):
            m.d.sync += pk_ready.eq(pk_valid)
        with m.If(h_do & (src == SRC_PARK)):
            with m.If(h_park):
                m.d.sync += pk_ready.bit_select(pk_sel, 1).eq(0)
            with m.Else():
                m.d.sync += pk_valid.bit_select(pk_sel, 1).eq(0)
        with m.If(h_do & (src == SRC_REQ) & h_park):
            m.d.sync += [pk_valid.bit_select(pk_free, 1).eq(1),
                         pk_ready.bit_select(pk_free, 1).eq(0)]
            for i in range(P):
                with m.If(pk_free == i):
                    m.d.sync += pk[i].eq(ev)
        # outputs
        m.d.comb += [
            ndr_h.w_en.eq(h_do & h_ndr),
            ndr_h.w_data.eq(Cat(h_ndr_op, ev.tag)),
            drs_nxm.w_en.eq(h_do & h_drs_nxm),
            drs_nxm.w_data.eq(ev.tag),
            h_rd.w_en.eq(h_do & h_media_rd),
            h_rd.w_data.eq(Cat(ev.line, ev.tag, poison.q[0].hit)),
            host_rd_inc.eq(h_do & h_media_rd),
            host_wr_inc.eq(h_do & h_media_wr),
            host_wb.inc.en.eq(h_do & h_media_wr),
            host_wb.inc.line.eq(ev.line),
            poison.set_en.eq(h_do & h_poison_set),
            poison.set_line.eq(ev.line),
            poison.clr[0].en.eq(h_do & h_poison_clr),
            poison.clr[0].line.eq(ev.line),
            trk.rel_en.eq(h_do & h_trk_rel),
            trk.rel_idx.eq(birsp.payload.hdr.bi_tag),
        ]
        with m.If(h_do & h_alloc):
            m.d.sync += vic_ptr.eq(Mux(vic_ptr == n_ways - 1, 0, vic_ptr + 1))

        # ================================================================ device lanes
        dr, dw = self.dev.rd_req, self.dev.wr_req
        dr_line, dw_line = dr.payload.addr, dw.payload.addr
        m.d.comb += [lk_dr.line.eq(dr_line), cam_dr.line.eq(dr_line), poison.q[1].line.eq(dr_line),
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
            lanes.ready.eq(ready), lanes.host_valid.eq(ev_valid), lanes.host_line.eq(ev.line),
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
            d_rd.w_data.eq(Cat(dr.payload.id, dr.payload.op, dr_line, poison.q[1].hit)),
            dev_wb.inc.en.eq(dw_go),
            dev_wb.inc.line.eq(dw_line),
            poison.clr[1].en.eq(dw_go & (dw.payload.be == ALL_BE)),
            poison.clr[1].line.eq(dw_line),
        ]

        # ---- write queue: the host lane's write, else the device write lane's; a device write
        # that lost the slot to a host write gets the next cycle (the lanes' wr_turn holds host
        # writes back for one cycle)
        wq_in = Signal(wr_l)
        with m.If(h_do & h_media_wr):
            m.d.comb += [wq_in.id.eq(HOST_MEDIA_ID), wq_in.line.eq(ev.line),
                         wq_in.be.eq(Mux(rwd.payload.hdr.opcode == RwDOpcode.MEM_WR, ALL_BE,
                                         rwd.payload.be)),
                         wq_in.data.eq(rwd.payload.data), wq_in.host.eq(1), wq_in.tag.eq(ev.tag)]
        with m.Else():
            m.d.comb += [wq_in.id.eq(dw.payload.id), wq_in.line.eq(dw_line),
                         wq_in.be.eq(dw.payload.be), wq_in.data.eq(dw.payload.data)]
        m.d.comb += [wr_q.w_en.eq((h_do & h_media_wr) | dw_go), wr_q.w_data.eq(wq_in)]

        # ---- BITag allocation (one per cycle: host lane, then device read, then device write)
        alloc_line = Signal(lb)
        alloc_op = Signal(4)
        with m.If(h_do & h_alloc):
            m.d.comb += [alloc_line.eq(vic_line), alloc_op.eq(BISnpOpcode.BISNP_INV)]
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
        with m.If(h_do & (h_err != DcohError.NONE)):
            m.d.sync += [self.err.eq(1), self.err_code.eq(h_err), self.err_addr.eq(ev.line)]
        with m.Elif(media_err):
            m.d.sync += [self.err.eq(1), self.err_code.eq(DcohError.MEDIA)]
        proto = h_do & ((h_err == DcohError.ILLEGAL_REQ) | (h_err == DcohError.ILLEGAL_RWD) |
                        (h_err == DcohError.BIRSP_TAG) | (h_err == DcohError.BIRSP_KIND) |
                        (h_err == DcohError.SF_MISS_OWNED))
        m.d.sync += [self.bisnp_sent.eq(self.bisnp_sent + any_alloc),
                     self.conflicts.eq(self.conflicts + (h_do & h_conflict)),
                     self.proto_errors.eq(self.proto_errors + proto)]

        # ================================================================ assertions
        served_req = h_do & is_req & h_served
        m.d.sync += [
            # rule 5: no Req served while a BISnp to its line is outstanding
            Assert(~served_req | ~ev_bisnp_pending, "DCOH: Req served during BISnp"),
            # rule 2: a device write only to a line the SF says I, no BISnp outstanding
            Assert(~dw_go | ((lk_dw.state == SF_I) & ~cam_dw.hit), "DCOH: device write to a "
                   "line the host may hold"),
            # rule 3: a device read only when SF is I or S (I for RdOwn)
            Assert(~dr_go | (lk_dr.state != SF_A), "DCOH: device read of an owned line"),
            # a victim entry is replaced only when free
            Assert(~(h_do & h_sf_we & needs_entry & is_req & ~lk_h.hit) | lk_h.free,
                   "DCOH: allocation into a used way"),
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
                         self.obs_req_served_line.eq(ev.line),
                         self.obs_trk_valid.eq(trk.valid)]
        return m
