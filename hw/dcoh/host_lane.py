"""The DCOH's host lane: one host message per cycle, decided against the snoop filter."""
from types import SimpleNamespace

from amaranth.hdl import Module, Signal, Assert, Cat, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig, REGIONS
from ..cxl.messages import channel_signature
from ..cxl_encodings import (RwDOpcode, BIRspOpcode, BISnpOpcode, NDROpcode, MetaField,
                             MetaValue, SnpType, DcohError)
from .decode import (ReqDecode, A_SPEC, A_ERR_RD, A_ERR_ND, A_RDCUR, A_RD_S, A_RD_A, A_INV_A,
                     A_INV_I)
from .snoop_filter import LookupSignature, NextLookupSignature, SF_I, SF_S, SF_A
from .tracker import CamSignature

__all__ = ["HostLane", "SRC_NONE", "SRC_BIRSP", "SRC_RWD", "SRC_PARK", "SRC_REQ",
           "park_layout"]

ALL_BE = (1 << 64) - 1

# host lane event sources
SRC_NONE, SRC_BIRSP, SRC_RWD, SRC_PARK, SRC_REQ = range(5)


def park_layout(lb):
    """A parked Req (and the Req-shaped view of the host lane's event)."""
    return data.StructLayout({"opcode": 4, "snp": 3, "mf": 2, "mv": 2, "tag": 16, "line": lb,
                              "hi_bad": 1})


class HostLane(wiring.Component):
    """The DCOH's host lane (docs/coherence.md): one host message per cycle, in the order BIRsp,
    then RwD, then a parked Req that a BIRsp woke, then a new Req; two stages.

    **Select** takes that event off its channel (or out of its park slot: the slot stays valid,
    not ready) into the decision register whenever the register is empty or its event is
    consumed in the same cycle. A new Req that might find no park slot is only *peeked* (see
    :meth:`_select`). A BIRsp's line and the validity of its BITag are read from the tracker
    here (``tag_q_*``); a tag the decision stage releases in this cycle reads as not valid.

    **Decide** looks the registered event's line up (snoop filter ``lk``, outstanding BISnps
    ``cam``, the write buckets; every lookup sees all earlier events' updates: the tracker and
    the buckets answer combinationally, and the snoop filter reads its ways a cycle ahead at
    the line the register takes, ``lk_next``, transparently for that cycle's write) and
    decides what the event does:
    serve it (NDR Cmp*/DRS via the DCOH's queues, a media read or write, a snoop-filter
    update), park a Req that must wait for a BIRsp (its line has a BISnp outstanding or an
    older Req parked, or its set is full and a victim is snooped: ``alloc`` with ``victim``),
    answer an error, or wait for room (the event stays in the register). ``do`` is high in the
    cycle the event is consumed; every effect output is valid only with ``do``.

    Latency: one cycle from a channel handshake to the decision (a host read's DRS one cycle
    later than with a combinational lane); one event per cycle while nothing waits for room.

    Parameters
    ----------
    cfg : DeviceConfig
        Regions, ``sf_ways``, ``park_slots``.

    Members
    -------
    m2s_req, m2s_rwd, m2s_birsp : In(channel signatures)
        The host's M2S channels (``ready`` driven here: the select stage takes the message).
    stores_ready : In(1)
        The DCOH's stores finished their init sweeps (no event before).
    tag_q_valid, tag_q_op, tag_q_line : In
        The tracker entry of the BITag of the BIRsp on ``m2s_birsp`` (its tag is the query):
        valid, its BISnp opcode and line.
    valid, line, tag : Out
        The event in the decision stage (line address, CXL tag; a BIRsp's line is its BISnp's).
    wr_data, wr_be, wr_poison : Out
        A RwD event's data, byte enables (all ones for MemWr) and poison bit.
    bi_tag : Out(range(cfg.bi_tags))
        A BIRsp event's BITag (the one ``tag_release`` frees).
    do : Out(1)
        The event is consumed this cycle.
    lk : Out(LookupSignature), cam : Out(CamSignature), cam_way : Out(CamSignature) per way
        Lookups of the event's line in the snoop filter and the BITag tracker, and of each
        way's line of its set in the tracker (victim choice).
    lk_next : Out(NextLookupSignature)
        The line the decision register holds in the next cycle (``load``: it takes the
        selected event's ``line``), for the snoop filter's read a cycle ahead.
    wr_inflight : In(1)
        A media write of the line is in flight.
    tags_full : In(1)
        No free BITag.
    ndr_room, drs_room, rd_room, wq_room : In(1)
        Room in the NDR queue, the NXM DRS queue, the host read queue, the write queue.
    rd_slot, wr_slot : In(1)
        Fewer than ``cfg.host_reads`` / ``cfg.host_writes`` host media accesses in flight.
    dw_turn : In(1)
        The device write lane lost the write queue to this lane last cycle: no write now.
    sf_we, sf_way, sf_state : Out
        Snoop-filter write of the event's line.
    ndr, ndr_op, drs_nxm, media_rd, media_wr, tag_release : Out(1)
        The event's effects (with ``do``); a host media write carries the RwD's poison bit to
        the media as it is (``wr_poison``).
    alloc : Out(1), victim : Out(line_bits)
        A BITag for a BISnpInv of ``victim`` (a way of the full set, rotating).
    err : Out(4)
        ``DcohError`` of the event (with ``do``).
    conflict : Out(1)
        The event is a BIConflict (answered with BIConflictAck).
    served_req : Out(1)
        A Req (new or parked) is served this cycle (with ``do``).

    Errors: ILLEGAL_REQ / NXM / REFUSED (``ReqDecode``), ILLEGAL_RWD,
    SF_MISS_OWNED, BIRSP_TAG, BIRSP_KIND on ``err``; an assertion checks that no Req is served
    while a BISnp to its line is outstanding (rule 5) and that a new entry takes a free way.
    """

    def __init__(self, cfg: DeviceConfig):
        self.cfg = cfg
        lb = cfg.addr_bits - 6
        W = cfg.sf_ways
        super().__init__({
            "m2s_req": In(channel_signature("m2s_req")),
            "m2s_rwd": In(channel_signature("m2s_rwd")),
            "m2s_birsp": In(channel_signature("m2s_birsp")),
            "stores_ready": In(1),
            "valid": Out(1), "line": Out(lb), "tag": Out(16), "do": Out(1),
            "wr_data": Out(512), "wr_be": Out(64), "wr_poison": Out(1),
            "bi_tag": Out(range(cfg.bi_tags)),
            "lk": Out(LookupSignature(lb, W)), "lk_next": Out(NextLookupSignature(lb)),
            "cam": Out(CamSignature(lb)),
            "cam_way": Out(CamSignature(lb)).array(W),
            "wr_inflight": In(1),
            "tag_q_valid": In(1), "tag_q_op": In(4), "tag_q_line": In(lb), "tags_full": In(1),
            "ndr_room": In(1), "drs_room": In(1), "rd_room": In(1), "wq_room": In(1),
            "rd_slot": In(1), "wr_slot": In(1), "dw_turn": In(1),
            "sf_we": Out(1), "sf_way": Out(range(W)), "sf_state": Out(2),
            "ndr": Out(1), "ndr_op": Out(3), "drs_nxm": Out(1), "media_rd": Out(1),
            "media_wr": Out(1), "tag_release": Out(1), "alloc": Out(1), "victim": Out(lb),
            "err": Out(4),
            "conflict": Out(1), "served_req": Out(1),
        })

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
        pk = self._park_slots(m)
        st = self._stage(m)
        ev, src = st.ev, st.src
        sel = self._select(m, pk, st)
        ctx = self._classify(m, ev, src, pk)
        vic = self._victim(m)
        h = self._decide(m, ev, src, pk, ctx, vic, st)
        self._load(m, sel, st, h)
        self._effects(m, ev, src, pk, vic, h, sel, st)
        served_req = h.do & ctx.is_req & h.served
        m.d.comb += self.served_req.eq(served_req)
        m.d.sync += [
            # rule 5: no Req served while a BISnp to its line is outstanding
            Assert(~served_req | ~ctx.bisnp_pending, "DCOH: Req served during BISnp"),
            # a victim entry is replaced only when free
            Assert(~(h.do & h.sf_we & ctx.needs_entry & ctx.is_req & ~self.lk.hit) |
                   self.lk.free, "DCOH: allocation into a used way"),
        ]
        return m

    def _park_slots(self, m):
        """Park slot registers; the first woken slot (``sel``; a BIRsp in the decision stage,
        ``wake``, wakes every slot for the select stage of its own cycle) and the first free
        one."""
        P = self.cfg.park_slots
        lb = self.cfg.addr_bits - 6
        pk_valid = Signal(P)
        pk_ready = Signal(P)
        wake = Signal(name="wake")
        pk = [Signal(park_layout(lb), name=f"park{i}") for i in range(P)]
        pk_sel = Signal(range(P))
        pk_any_ready = Signal()
        for i in reversed(range(P)):
            with m.If(pk_valid[i] & (pk_ready[i] | wake)):
                m.d.comb += [pk_sel.eq(i), pk_any_ready.eq(1)]
        pk_free = Signal(range(P))
        pk_full = Signal()
        pk_two_free = Signal()
        m.d.comb += [pk_full.eq(pk_valid.all()),
                     pk_two_free.eq(sum((~pk_valid[i]).as_unsigned() for i in range(P)) >= 2)]
        for i in reversed(range(P)):
            with m.If(~pk_valid[i]):
                m.d.comb += pk_free.eq(i)
        return SimpleNamespace(valid=pk_valid, ready=pk_ready, wake=wake, slots=pk, sel=pk_sel,
                               any_ready=pk_any_ready, free=pk_free, full=pk_full,
                               two_free=pk_two_free)

    def _select(self, m, pk, st):
        """The select stage: the next event, its source (``SRC_*``) and what it carries.

        A new Req is taken off its channel only while a park slot stays free for it after the
        Req in the decision register (if any) has parked, so a taken Req never waits for a slot
        (only a later event could free one). Otherwise it is *peeked*: decided from the channel
        and taken only when its decision consumes it; a peeked Req that waits leaves the
        decision register in the next cycle (and is decided again the cycle after), so BIRsps,
        RwDs and woken Reqs go first as always, and a Req that needs no slot is served while
        every slot is in use."""
        lb = self.cfg.addr_bits - 6
        req, rwd, birsp = self.m2s_req, self.m2s_rwd, self.m2s_birsp
        src = Signal(range(5), name="sel_src")
        ev = Signal(park_layout(lb), name="sel_ev")   # Req-shaped view of the event
        with m.If(~self.stores_ready):
            m.d.comb += src.eq(SRC_NONE)
        with m.Elif(birsp.valid):
            m.d.comb += src.eq(SRC_BIRSP)
        with m.Elif(rwd.valid):
            m.d.comb += src.eq(SRC_RWD)
        with m.Elif(pk.any_ready):
            m.d.comb += src.eq(SRC_PARK)
        # (not while a peeked Req is decided: its decision may take it off the channel)
        with m.Elif(req.valid & ~st.peek):
            m.d.comb += src.eq(SRC_REQ)
        peek = Signal(name="sel_peek")
        m.d.comb += peek.eq((src == SRC_REQ) & (pk.full | ((st.src == SRC_REQ) & ~pk.two_free)))

        def hdr_view(h):
            return [ev.opcode.eq(h.opcode), ev.snp.eq(h.snp_type), ev.mf.eq(h.meta_field),
                    ev.mv.eq(h.meta_value), ev.tag.eq(h.tag), ev.line.eq(h.addr[:lb]),
                    ev.hi_bad.eq(h.addr[lb:] != 0)]

        with m.Switch(src):
            with m.Case(SRC_BIRSP):
                m.d.comb += [ev.line.eq(self.tag_q_line), ev.opcode.eq(birsp.payload.hdr.opcode)]
            with m.Case(SRC_RWD):
                m.d.comb += hdr_view(rwd.payload.hdr)
            with m.Case(SRC_PARK):
                for i in range(len(pk.slots)):
                    with m.If(pk.sel == i):
                        m.d.comb += ev.eq(pk.slots[i])
            with m.Case(SRC_REQ):
                m.d.comb += hdr_view(req.payload.hdr)
        hdr = rwd.payload.hdr
        return SimpleNamespace(
            src=src, ev=ev, peek=peek, slot=pk.sel, bi_tag=birsp.payload.hdr.bi_tag,
            tag_op=self.tag_q_op,
            data=rwd.payload.data, poison=hdr.poison,
            be=Mux(hdr.opcode == RwDOpcode.MEM_WR, ALL_BE, rwd.payload.be))

    def _stage(self, m):
        """The decision register: the event (``src``, ``ev``) and what it carries; loaded by
        :meth:`_load`."""
        lb = self.cfg.addr_bits - 6
        st = SimpleNamespace(
            src=Signal(range(5), name="src"), ev=Signal(park_layout(lb), name="ev"),
            take=Signal(name="take"), do=Signal(name="h_do"), peek=Signal(name="ev_peek"),
            slot=Signal(range(self.cfg.park_slots), name="ev_slot"),
            tag_ok=Signal(name="ev_tag_ok"),
            tag_op=Signal(4, name="ev_tag_op"),
            bi_tag=Signal(range(self.cfg.bi_tags), name="ev_bi_tag"),
            dsel=Signal(name="ev_dsel"))
        ev = st.ev
        m.d.comb += [self.valid.eq(st.src != SRC_NONE), self.line.eq(ev.line),
                     self.tag.eq(ev.tag), self.lk.line.eq(ev.line), self.cam.line.eq(ev.line),
                     self.bi_tag.eq(st.bi_tag)]
        return st

    def _rwd_data(self, m, sel, st):
        """A RwD's data, byte enables and poison bit, in two registers used in turn: each loads
        the channel's payload every cycle unless it holds the data of the RwD in the decision
        register (``dsel``), so their enables come from registers and not from the decision
        (a single register would load only when the decision takes the next event: an enable
        of 577 flip-flops at the end of the lane's longest path)."""
        lay = data.StructLayout({"data": 512, "be": 64, "poison": 1})
        regs = [Signal(lay, name=f"rwd_data{k}", reset_less=True) for k in range(2)]
        for k, r in enumerate(regs):
            with m.If(~((st.src == SRC_RWD) & (st.dsel == k))):
                m.d.sync += [r.data.eq(sel.data), r.be.eq(sel.be), r.poison.eq(sel.poison)]
        held = Signal(lay)
        m.d.comb += [held.eq(Mux(st.dsel, regs[1], regs[0])), self.wr_data.eq(held.data),
                     self.wr_be.eq(held.be), self.wr_poison.eq(held.poison)]

    def _load(self, m, sel, st, h):
        """The selected event enters the decision register when it is empty, its event is
        consumed or peeked (``take``)."""
        m.d.comb += [st.take.eq(self.stores_ready & ((st.src == SRC_NONE) | st.do | st.peek)),
                     self.lk_next.load.eq(st.take), self.lk_next.line.eq(sel.ev.line)]
        # a BITag released by this cycle's decision is no longer outstanding
        tag_ok = Signal(name="sel_tag_ok")
        m.d.comb += tag_ok.eq(self.tag_q_valid & ~(h.do & h.trk_rel & (st.bi_tag == sel.bi_tag)))
        with m.If(st.take):
            m.d.sync += [st.src.eq(sel.src), st.ev.eq(sel.ev), st.peek.eq(sel.peek),
                         st.tag_ok.eq(tag_ok),
                         st.slot.eq(sel.slot), st.tag_op.eq(sel.tag_op),
                         st.bi_tag.eq(sel.bi_tag),
                         # (the register that loaded this cycle: not the one held, if any)
                         st.dsel.eq((st.src == SRC_RWD) & ~st.dsel)]
        self._rwd_data(m, sel, st)

    def _classify(self, m, ev, src, pk):
        """Region, decode and blocking facts of the event."""
        ev_rw, ev_ro, ev_log = self._region(m, ev.line, "ev")
        ev_nxm = Signal()
        m.d.comb += ev_nxm.eq(ev.hi_bad | ~(ev_rw | ev_ro | ev_log))
        ev_parked = Signal()
        m.d.comb += ev_parked.eq(Cat(pk.valid[i] & (pk.slots[i].line == ev.line)
                                     for i in range(len(pk.slots))).any())
        m.submodules.decode = dec = ReqDecode()
        m.d.comb += [dec.opcode.eq(ev.opcode), dec.snp.eq(ev.snp), dec.mf.eq(ev.mf),
                     dec.mv.eq(ev.mv), dec.rw.eq(ev_rw), dec.ro.eq(ev_ro), dec.nxm.eq(ev_nxm)]
        act = dec.act
        new_state = Signal(2)
        m.d.comb += new_state.eq(Mux(act == A_RD_S, SF_S, SF_A))
        return SimpleNamespace(
            rw=ev_rw, nxm=ev_nxm, parked=ev_parked, act=act, act_err=dec.err,
            meta0=ev.mf == MetaField.META0_STATE, bisnp_pending=self.cam.hit,
            needs_media_rd=(act == A_RDCUR) | (act == A_RD_S) | (act == A_RD_A),
            needs_entry=(act == A_RD_S) | (act == A_RD_A) | (act == A_INV_A),
            new_state=new_state, is_req=(src == SRC_REQ) | (src == SRC_PARK))

    def _victim(self, m):
        """Victim of a full set: the first way, rotating, whose line has no BISnp
        outstanding."""
        n_ways = self.cfg.sf_ways
        lb = self.cfg.addr_bits - 6
        lk_h, cam_way = self.lk, self.cam_way
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
        m.d.comb += self.victim.eq(vic_line)
        return SimpleNamespace(ptr=vic_ptr, ok=vic_ok, line=vic_line)

    def _decide(self, m, ev, src, pk, ctx, vic, st):
        """What this cycle does (``fire`` = the event is consumed); returns the ``h_*``
        decision signals by name without the prefix."""
        n_ways = self.cfg.sf_ways
        lk_h = self.lk
        act, act_err, meta0 = ctx.act, ctx.act_err, ctx.meta0
        ev_bisnp_pending, ev_parked, ev_nxm = ctx.bisnp_pending, ctx.parked, ctx.nxm
        ev_rw, needs_media_rd, needs_entry = ctx.rw, ctx.needs_media_rd, ctx.needs_entry
        new_state, is_req, pk_full = ctx.new_state, ctx.is_req, pk.full
        vic_ok = vic.ok
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
        h_trk_rel = Signal()
        h_conflict = Signal()

        ndr_room = self.ndr_room
        is_req = (src == SRC_REQ) | (src == SRC_PARK)
        can_park = (src == SRC_PARK) | ~pk_full

        with m.If(is_req):
            blocked = (act != A_SPEC) & (ev_bisnp_pending | ((src == SRC_REQ) & ev_parked))
            with m.If(blocked):
                m.d.comb += [h_fire.eq(can_park), h_park.eq(1)]
            with m.Elif(act == A_SPEC):
                m.d.comb += h_fire.eq(1)
            with m.Elif(act == A_ERR_RD):
                m.d.comb += [h_fire.eq(self.drs_room), h_drs_nxm.eq(1), h_served.eq(1),
                             h_err.eq(act_err)]
            with m.Elif(act == A_ERR_ND):
                m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1), h_ndr_op.eq(NDROpcode.CMP),
                             h_served.eq(1), h_err.eq(act_err)]
            with m.Else():
                rd_ok = ~needs_media_rd | (self.rd_room & ~self.wr_inflight &
                                           self.rd_slot)
                res_ok = ndr_room & rd_ok
                with m.If(needs_entry & ~lk_h.hit & ~lk_h.free):
                    # full set: BISnpInv a victim, park until a BIRsp frees a way
                    # (with no free BITag it parks without one: the BIRsp that frees a
                    # tag wakes it)
                    m.d.comb += [h_fire.eq(can_park), h_park.eq(1),
                                 h_alloc.eq(vic_ok & ~self.tags_full)]
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
            with m.If(ev.opcode == RwDOpcode.BI_CONFLICT):
                m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1),
                             h_ndr_op.eq(NDROpcode.BI_CONFLICT_ACK), h_conflict.eq(1)]
            with m.Else():
                is_wr = (ev.opcode == RwDOpcode.MEM_WR) | (ev.opcode == RwDOpcode.MEM_WR_PTL)
                meta_ok = (ev.mf == MetaField.NO_OP) | (meta0 & (
                    (ev.mv == MetaValue.I) | (ev.mv == MetaValue.A) | (ev.mv == MetaValue.S)))
                legal_wr = is_wr & (ev.snp == SnpType.NO_OP) & meta_ok
                with m.If(~legal_wr | ev_nxm | ~ev_rw):
                    m.d.comb += [h_fire.eq(ndr_room), h_ndr.eq(1), h_ndr_op.eq(NDROpcode.CMP)]
                    with m.If(~legal_wr):
                        m.d.comb += h_err.eq(DcohError.ILLEGAL_RWD)
                    with m.Elif(ev_nxm):
                        m.d.comb += h_err.eq(DcohError.NXM)
                    with m.Else():
                        m.d.comb += h_err.eq(DcohError.REFUSED)
                with m.Else():
                    m.d.comb += [h_fire.eq(self.wq_room & ~self.dw_turn &
                                           self.wr_slot),
                                 h_media_wr.eq(1)]
                    with m.If(meta0):
                        with m.If(lk_h.hit):
                            m.d.comb += [h_sf_we.eq(1), h_sf_way.eq(lk_h.way),
                                         h_sf_state.eq(Mux(ev.mv == MetaValue.I, SF_I,
                                                           Mux(ev.mv == MetaValue.S, SF_S, SF_A)))]
                        with m.Elif(ev.mv != MetaValue.I):
                            m.d.comb += h_err.eq(DcohError.SF_MISS_OWNED)

        with m.Elif(src == SRC_BIRSP):
            op = ev.opcode
            m.d.comb += h_fire.eq(1)
            with m.If(~st.tag_ok):
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
                with m.Switch(st.tag_op):
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
                m.d.comb += h_trk_rel.eq(1)
                with m.If(lk_h.hit):
                    m.d.comb += [h_sf_we.eq(1), h_sf_way.eq(lk_h.way), h_sf_state.eq(rsp_state)]

        h_do = st.do
        m.d.comb += h_do.eq(h_fire & self.valid)
        return SimpleNamespace(**{k[2:]: v for k, v in locals().items() if k.startswith("h_")})

    def _effects(self, m, ev, src, pk, vic, h, sel, st):
        """Ready of the channels, the effect outputs and the park slot / victim updates."""
        n_ways = self.cfg.sf_ways
        take = st.take
        m.d.comb += [self.m2s_req.ready.eq((take & (sel.src == SRC_REQ) & ~sel.peek) |
                                           (h.do & st.peek)),
                     self.m2s_rwd.ready.eq(take & (sel.src == SRC_RWD)),
                     self.m2s_birsp.ready.eq(take & (sel.src == SRC_BIRSP)),
                     self.do.eq(h.do)]
        m.d.comb += [self.sf_we.eq(h.sf_we), self.sf_way.eq(h.sf_way),
                     self.sf_state.eq(h.sf_state), self.ndr.eq(h.ndr), self.ndr_op.eq(h.ndr_op),
                     self.drs_nxm.eq(h.drs_nxm), self.media_rd.eq(h.media_rd),
                     self.media_wr.eq(h.media_wr), self.tag_release.eq(h.trk_rel),
                     self.alloc.eq(h.alloc), self.err.eq(h.err), self.conflict.eq(h.conflict)]
        # park slots: a BIRsp wakes every parked Req; the select stage takes a woken one (its
        # slot stays valid, not ready, while it is decided); a served one frees its slot
        # (a BIRsp with a valid tag always wakes: from registers only, so the select stage
        # sees it in the same cycle)
        m.d.comb += pk.wake.eq((src == SRC_BIRSP) & st.tag_ok)
        with m.If(pk.wake):
            m.d.sync += pk.ready.eq(pk.valid)
        with m.If(take & (sel.src == SRC_PARK)):
            m.d.sync += pk.ready.bit_select(sel.slot, 1).eq(0)
        with m.If(h.do & (src == SRC_PARK) & ~h.park):
            m.d.sync += pk.valid.bit_select(st.slot, 1).eq(0)
        with m.If(h.do & (src == SRC_REQ) & h.park):
            m.d.sync += [pk.valid.bit_select(pk.free, 1).eq(1),
                         pk.ready.bit_select(pk.free, 1).eq(0)]
            for i in range(len(pk.slots)):
                with m.If(pk.free == i):
                    m.d.sync += pk.slots[i].eq(ev)
        with m.If(h.do & h.alloc):
            m.d.sync += vic.ptr.eq(Mux(vic.ptr == n_ways - 1, 0, vic.ptr + 1))
