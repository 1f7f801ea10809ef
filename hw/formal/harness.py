"""Formal harness of the DCOH: an abstract CXL.mem host, an abstract media, arbitrary engines.

The DCOH (``hw.dcoh.DCOH(cfg, observe=True)``, built by :func:`.dut.build_dcoh`) in a reduced
configuration (:func:`reduced_config`: 16-bit addresses, 2 x 2 snoop filter, 2 BITags, 2 park
slots, 2 reads/writes in flight) sits between three free environments, all of whose choices are
``AnySeq`` values narrowed by ``Assume`` to what the contract (docs/coherence.md) allows:

**Abstract host** (M2S Req, RwD, BIRsp out; S2M NDR, DRS, BISnp in, with arbitrary ready). It
works on the lines :data:`HOST_LINES` of the table region (three map to snoop-filter set 0, so
capacity victims happen, one to set 1). Each M2S channel is a register the host loads with a new
message when it is empty or being taken, so valid and payload are stable until ready. Legal
behaviour per line:

- at most one transaction (Req or MemWr) outstanding per line; Req tag = line index, so every
  NDR/DRS names its line; a transaction completes when all its answers arrived (the host checks
  that each answer is one it expects: right tag, right opcode, only after the Req was served);
- any legal Req of the contract's table (MemSpecRd at any time, without an answer); no Req to a
  line while the host holds an unanswered BISnp to it;
- MemWr/MemWrPtl with a legal meta field (no-op, or Meta0 I/A/S; Meta0 A or S for the observed
  line only while the host holds it at least that high); data and poison 0 (abstract data);
- a BISnp that meets the host's own outstanding Req to its line is answered only after a
  BIConflict (tag ``len(HOST_LINES) + line index``) and its BI-ConflictAck; a BISnp to a line
  with a MemWr outstanding only after that write's Cmp (the write-back rule); answers are legal
  for the snoop (BISnpInv -> BIRspI, BISnpData -> I/S, BISnpCur -> I/S/E), at most one per
  BISnp.

The host keeps its cache state (I/S/E) for one **observed line**, an ``AnyConst`` choice among
the host lines (so the proof covers each): it drops to the level a message announces when it
sends the message (MemClnEvct, MemInv-I, MemWr Meta0, MemRd-S, a BIRsp) and rises on the
grant (Cmp-S -> S, Cmp-E -> E) when the NDR arrives. Other lines have no tracked state, which
only widens the host's choices there.

**Abstract media** on ``mem``: accepts up to ``max_reads`` reads and ``max_writes`` writes,
answers each direction in request order after an arbitrary delay (a possible error bit, on
reads a possible poison bit, data 0). **Engines** on ``dev``: arbitrary RdCur/RdOwn/Wr to the host lines with ids 0..14, arbitrary
ready on the responses.

Properties (architecture 5.3; names as the runner prints them):

1. ``rule1.sf_inclusive``: host state of the observed line <= its snoop-filter state (S needs
   S or A, E needs A); ``rule1.no_sf_miss_owned_obs``: no SF_MISS_OWNED for it.
2. ``rule5.bi_blocking``: no host Req to the observed line is served while a BISnp to it is
   outstanding.
3. ``rule7.*``: every BISnp has a tag below ``bi_tags`` that is not outstanding already (and is
   the only BISnp outstanding to its line); the tracker holds every tag the host has not
   answered yet (or whose answer is still in flight); every BIRsp answers an outstanding tag;
   a legal host never sees BIRSP_TAG/BIRSP_KIND or any other protocol error.
4. ``rule6.ack_after_cmp``: a BI-ConflictAck for the observed line never leaves while a Cmp of a
   Req to that line that was already served has not.

Plus ``host.*`` checks of every answer the host gets, ``stream.*`` checks that the DCOH's
output streams keep valid and payload stable until ready, and the DCOH's own in-RTL
assertions. ``helper.*`` assertions are invariants over harness and DCOH state that make
k-induction go through (each is proved too; none is assumed).

Broken variants (:data:`BROKEN`, ``python -m trainingcxl.formal --broken NAME``) swap a submodule of
the DCOH for a faulty one while it elaborates (the RTL is not touched); each must give a
counterexample.
"""
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Elaboratable, Module, Mux, ResetSignal, Signal
from amaranth.lib import data

from ..config import DeviceConfig
from ..cxl_encodings import (BIRspOpcode, BISnpOpcode, DcohError, DRSOpcode, MetaField,
                             MetaValue, NDROpcode, ReqOpcode, RwDOpcode, SnpType, HOST_MEDIA_ID)
from .dut import BROKEN, build_dcoh
from .props import Props, free, free_const

__all__ = ["FormalHarness", "build", "reduced_config", "HOST_LINES", "HARNESS_NAME", "BROKEN",
           "TRACE"]

HARNESS_NAME = "formal_dcoh"
# Host lines (line addresses in the table region): 0, 2, 4 share snoop-filter set 0 (2 ways:
# the third needs a victim), 1 is in set 1.
HOST_LINES = (0, 2, 4, 1)
# host cache states of the observed line (ordered like the snoop-filter states I, S, A)
H_I, H_S, H_E = 0, 1, 2
# per-BISnp phase in the host
PH_CONFLICT, PH_WAIT_ACK, PH_READY = 0, 1, 2
K_INDUCTION = 2
ALL_BE = (1 << 64) - 1


def reduced_config(**overrides) -> DeviceConfig:
    """The DCOH configuration of the proof: every region inside 16-bit addresses, the smallest
    structures that still have victims, parking, tracker-full and FIFO-full cases."""
    base = dict(addr_bits=16,
                table_base=0x0000, table_size=0x400,
                staging_base=0x0400, staging_size=0x400,
                log_base=0x0800, log_size=0x400,
                superblock_base=0x0C00, superblock_size=0x40,
                slots_base=0x1000, slots_size=0x400,
                sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2, host_reads=2, host_writes=2,
                wr_buckets=2, max_reads=2, max_writes=2)
    base.update(overrides)
    return DeviceConfig(**base)


def legal_req(op, snp, mf, mv):
    """Req combinations of the contract's table (docs/coherence.md)."""
    meta0 = mf == MetaField.META0_STATE
    return (((op == ReqOpcode.MEM_RD) &
             (((snp == SnpType.SNP_INV) & meta0 & (mv == MetaValue.A)) |
              ((snp == SnpType.SNP_DATA) & meta0 & (mv == MetaValue.S)) |
              ((snp == SnpType.SNP_CUR) & (mf == MetaField.NO_OP)))) |
            ((op == ReqOpcode.MEM_RD_DATA) & (snp == SnpType.SNP_DATA)) |
            (((op == ReqOpcode.MEM_INV) | (op == ReqOpcode.MEM_INV_NT)) &
             (snp == SnpType.SNP_INV) & meta0 & ((mv == MetaValue.A) | (mv == MetaValue.I))) |
            ((op == ReqOpcode.MEM_CLN_EVCT) & (snp == SnpType.NO_OP) & meta0 &
             (mv == MetaValue.I)) |
            (op == ReqOpcode.MEM_SPEC_RD))


def req_expect(op, snp, mf, mv):
    """``(NDR opcode, DRS expected, host state the Req's grant needs in the SF at least,
    host state drops to on sending ("keep" = unchanged))`` of a legal non-speculative Req."""
    meta0 = mf == MetaField.META0_STATE
    rd_data = op == ReqOpcode.MEM_RD_DATA
    rd_s = (op == ReqOpcode.MEM_RD) & (snp == SnpType.SNP_DATA)
    own = rd_data | (meta0 & (mv == MetaValue.A))          # MemRd-A, MemRdData, MemInv-A
    drop_i = ~rd_data & meta0 & (mv == MetaValue.I)        # MemInv-I, MemClnEvct
    ndr = Mux(own, NDROpcode.CMP_E, Mux(rd_s, NDROpcode.CMP_S, NDROpcode.CMP))
    drs = (op == ReqOpcode.MEM_RD) | rd_data
    return ndr, drs, own, rd_s, drop_i


def meta_state(mv):
    """Host state a Meta0 value announces (I, S, A -> H_I, H_S, H_E)."""
    return Mux(mv == MetaValue.A, H_E, Mux(mv == MetaValue.S, H_S, H_I))


def smin(a, b):
    return Mux(a < b, a, b)


class FormalHarness(Elaboratable):
    """The DCOH between the abstract host, media and engines, with the property monitors.

    ``broken``: a key of :data:`BROKEN`. ``helpers``: add the ``helper.*`` invariants for
    k-induction (:func:`.invariants.add_invariants`). ``stream_checks``: check the DCOH's
    output streams for stability.
    """

    def __init__(self, cfg=None, *, broken=None, lines=HOST_LINES, helpers=True,
                 stream_checks=True):
        if broken is not None and broken not in BROKEN:
            raise ValueError(f"unknown broken variant {broken!r}; known: {', '.join(BROKEN)}")
        self.cfg = cfg or reduced_config()
        self.broken = broken
        self.lines = tuple(lines)
        self.helpers = helpers
        self.stream_checks = stream_checks
        self.props = Props()
        lb = self.cfg.addr_bits - 6
        if len(self.lines) & (len(self.lines) - 1) or len(self.lines) < 2:
            raise ValueError("the number of host lines must be a power of two >= 2")
        for ln in self.lines:
            if self.cfg.region_of(ln << 6) not in ("table", "staging") or ln >= 1 << lb:
                raise ValueError(f"host line {ln:#x} is not in a host read/write region")

    # -------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        p = self.props
        cfg = self.cfg
        nl, nt = len(self.lines), cfg.bi_tags
        lb = cfg.addr_bits - 6
        h = self.h = SimpleNamespace(nl=nl, nt=nt, lb=lb, idx=range(nl))

        dut, self.internals = build_dcoh(cfg, self.broken, platform)
        m.submodules.dcoh = self.dut = dut
        h.line_of = Array(Const(ln, lb) for ln in self.lines)

        p.assume(m, "env.no_reset", ~ResetSignal())
        h.obs = free_const(m, h.idx, "obs_idx")
        h.obs_line = Signal(lb, name="obs_line")
        m.d.comb += [h.obs_line.eq(h.line_of[h.obs]), dut.obs_line.eq(h.obs_line)]

        self._host_state(m)
        self._req_channel(m)
        self._rwd_channel(m)
        self._birsp_channel(m)
        self._s2m(m)
        self._checks(m)
        self._updates(m)
        self._engines(m)
        self._media(m)
        if self.stream_checks:
            self._stream_checks(m)
        if self.helpers:
            self._helpers(m)
        self._covers(m)
        self._trace_names(m)
        return m

    def index_of(self, m, addr, name):
        """``(addr is a host line, its index)`` for a line address value."""
        hit = Signal(name=f"{name}_hit")
        idx = Signal(self.h.idx, name=f"{name}_idx")
        for i, ln in enumerate(self.lines):
            with m.If(addr == ln):
                m.d.comb += [hit.eq(1), idx.eq(i)]
        return hit, idx

    # ---- host bookkeeping ----------------------------------------------------------------
    def _host_state(self, m):
        h = self.h
        nl, nt = h.nl, h.nt
        # per line: the outstanding transaction and the answers it still expects
        h.pend = Signal(nl, name="h_pend")        # transaction outstanding
        h.preq = Signal(nl, name="h_preq")        # ... and it is a Req (else a MemWr)
        h.xndr = Signal(nl, name="h_xndr")        # NDR still expected
        h.xdrs = Signal(nl, name="h_xdrs")        # DRS still expected
        h.xop = Array(Signal(3, name=f"h_xop{i}") for i in range(nl))    # its NDR opcode
        h.acc = Signal(nl, name="h_acc")          # Req taken by the DCOH
        h.srv = Signal(nl, name="h_srv")          # Req served (observation port)
        h.conf = Signal(nl, name="h_conf")        # BIConflict sent, ack not yet received
        # per BITag: a BISnp the host holds and has not answered
        h.sv = Signal(nt, name="h_snp_valid")
        h.sidx = Array(Signal(h.idx, name=f"h_snp_idx{t}") for t in range(nt))
        h.sop = Array(Signal(4, name=f"h_snp_op{t}") for t in range(nt))
        h.sph = Array(Signal(2, name=f"h_snp_phase{t}") for t in range(nt))
        h.hs = Signal(2, name="h_state")          # host state of the observed line
        h.owed = Signal(name="h_cmp_owed")        # served Req of the observed line, Cmp not out

    def holds_snoop(self, i):
        h = self.h
        return Cat(h.sv[t] & (h.sidx[t] == i) for t in range(h.nt)).any()

    # ---- M2S channels: registers holding only the host's choices --------------------------
    def _req_channel(self, m):
        p, h, dut = self.props, self.h, self.dut
        h.req_v = Signal(name="req_valid")
        h.rq = Signal(data.StructLayout({"idx": h.idx, "op": 4, "snp": 3, "mf": 2, "mv": 2}),
                      name="req_fields")
        pl = dut.m2s_req.payload.hdr
        m.d.comb += [dut.m2s_req.valid.eq(h.req_v), pl.opcode.eq(h.rq.op),
                     pl.snp_type.eq(h.rq.snp), pl.meta_field.eq(h.rq.mf),
                     pl.meta_value.eq(h.rq.mv), pl.tag.eq(h.rq.idx),
                     pl.addr.eq(h.line_of[h.rq.idx])]
        h.req_fire = Signal(name="req_fire")
        m.d.comb += h.req_fire.eq(h.req_v & dut.m2s_req.ready)
        load = ~h.req_v | h.req_fire
        go = free(m, 1, "r_go")
        h.r = r = Signal(h.rq.shape(), name="r_choice")
        m.d.comb += r.eq(free(m, len(h.rq.as_value()), "r_bits"))
        h.r_spec = r.op == ReqOpcode.MEM_SPEC_RD
        h.new_req = Signal(name="new_req")      # a Req is sent (loaded) this cycle
        h.new_req_line = Signal(name="new_req_line")   # ... one that is a transaction
        m.d.comb += [h.new_req.eq(load & go), h.new_req_line.eq(load & go & ~h.r_spec)]
        p.assume(m, "host.req_legal", ~h.new_req | (
            legal_req(r.op, r.snp, r.mf, r.mv) &
            (h.r_spec | (~h.pend.bit_select(r.idx, 1) & ~self.holds_snoop(r.idx)))))
        with m.If(load):
            m.d.sync += [h.req_v.eq(go), h.rq.eq(r)]
        h.req_spec = h.rq.op == ReqOpcode.MEM_SPEC_RD

    def _rwd_channel(self, m):
        p, h, dut = self.props, self.h, self.dut
        h.rwd_v = Signal(name="rwd_valid")
        lay = data.StructLayout({"conflict": 1, "idx": h.idx, "ptl": 1, "mf": 2, "mv": 2,
                                 "be_full": 1})
        h.wq = Signal(lay, name="rwd_fields")
        wq = h.wq
        pl = dut.m2s_rwd.payload
        m.d.comb += [dut.m2s_rwd.valid.eq(h.rwd_v),
                     pl.hdr.opcode.eq(Mux(wq.conflict, RwDOpcode.BI_CONFLICT,
                                          Mux(wq.ptl, RwDOpcode.MEM_WR_PTL, RwDOpcode.MEM_WR))),
                     pl.hdr.snp_type.eq(SnpType.NO_OP),
                     pl.hdr.meta_field.eq(Mux(wq.conflict, MetaField.NO_OP, wq.mf)),
                     pl.hdr.meta_value.eq(Mux(wq.conflict, 0, wq.mv)),
                     pl.hdr.tag.eq(Mux(wq.conflict, h.nl + wq.idx, wq.idx)),
                     pl.hdr.addr.eq(h.line_of[wq.idx]),
                     pl.be.eq(Mux(wq.be_full | wq.conflict, ALL_BE, 1))]
        h.rwd_fire = Signal(name="rwd_fire")
        m.d.comb += h.rwd_fire.eq(h.rwd_v & dut.m2s_rwd.ready)
        load = ~h.rwd_v | h.rwd_fire
        go = free(m, 1, "w_go")
        h.w = w = Signal(lay, name="w_choice")
        m.d.comb += w.eq(free(m, len(wq.as_value()), "w_bits"))
        w_tag = free(m, range(h.nt), "w_snp_tag")   # the BISnp a BIConflict is for
        h.new_wr = Signal(name="new_wr")
        h.new_cf = Signal(name="new_conflict")
        m.d.comb += [h.new_wr.eq(load & go & ~w.conflict), h.new_cf.eq(load & go & w.conflict)]
        w_meta0 = w.mf == MetaField.META0_STATE
        h.w_on_obs = w.idx == h.obs
        p.assume(m, "host.wr_legal", ~h.new_wr | (
            ~h.pend.bit_select(w.idx, 1) & ~(h.new_req_line & (h.r.idx == w.idx)) &
            ((w.mf == MetaField.NO_OP) | (w_meta0 & (w.mv != 1))) &
            # Meta0 A/S keeps the line: only for a line the host holds that high
            (~h.w_on_obs | ~w_meta0 | (meta_state(w.mv) <= h.hs))))
        p.assume(m, "host.conflict_legal", ~h.new_cf | (
            (w_tag < h.nt) & h.sv.bit_select(w_tag, 1) & (h.sph[w_tag] == PH_CONFLICT) &
            (w.idx == h.sidx[w_tag])))
        h.w_tag = w_tag
        with m.If(load):
            m.d.sync += [h.rwd_v.eq(go), wq.eq(w)]
        h.w_down = Signal(2, name="w_down")
        m.d.comb += h.w_down.eq(Mux(w_meta0, smin(h.hs, meta_state(w.mv)), h.hs))
        h.rwd_is_wr = h.rwd_v & ~wq.conflict
        h.rwd_is_cf = h.rwd_v & wq.conflict

    def _birsp_channel(self, m):
        p, h, dut = self.props, self.h, self.dut
        h.br_v = Signal(name="birsp_valid")
        lay = data.StructLayout({"tag": range(h.nt), "op": 4, "idx": h.idx})
        h.bq = Signal(lay, name="birsp_fields")
        pl = dut.m2s_birsp.payload.hdr
        m.d.comb += [dut.m2s_birsp.valid.eq(h.br_v), pl.opcode.eq(h.bq.op),
                     pl.bi_tag.eq(h.bq.tag)]
        h.br_fire = Signal(name="birsp_fire")
        m.d.comb += h.br_fire.eq(h.br_v & dut.m2s_birsp.ready)
        load = ~h.br_v | h.br_fire
        go = free(m, 1, "b_go")
        b_tag = free(m, range(h.nt), "b_tag")
        b_op = free(m, 4, "b_op")
        b_idx = Signal(h.idx, name="b_idx")
        m.d.comb += b_idx.eq(h.sidx[b_tag])
        h.new_br = Signal(name="new_birsp")
        m.d.comb += h.new_br.eq(load & go)
        b_wr_out = h.pend.bit_select(b_idx, 1) & ~h.preq.bit_select(b_idx, 1)
        p.assume(m, "host.birsp_legal", ~h.new_br | (
            (b_tag < h.nt) & h.sv.bit_select(b_tag, 1) & (h.sph[b_tag] == PH_READY) &
            self.birsp_allowed(h.sop[b_tag], b_op) &
            # a write-back of the line must have its Cmp first
            ~b_wr_out & ~(h.new_wr & (h.w.idx == b_idx))))
        with m.If(load):
            m.d.sync += [h.br_v.eq(go), h.bq.tag.eq(b_tag), h.bq.op.eq(b_op), h.bq.idx.eq(b_idx)]
        h.b_tag, h.b_op, h.b_idx = b_tag, b_op, b_idx

    @staticmethod
    def birsp_allowed(snp_op, rsp_op):
        return Mux(snp_op == BISnpOpcode.BISNP_INV, rsp_op == BIRspOpcode.BIRSP_I,
                   Mux(snp_op == BISnpOpcode.BISNP_DATA,
                       (rsp_op == BIRspOpcode.BIRSP_I) | (rsp_op == BIRspOpcode.BIRSP_S),
                       (snp_op == BISnpOpcode.BISNP_CUR) &
                       ((rsp_op == BIRspOpcode.BIRSP_I) | (rsp_op == BIRspOpcode.BIRSP_S) |
                        (rsp_op == BIRspOpcode.BIRSP_E))))

    @staticmethod
    def rsp_state(op):
        return Mux(op == BIRspOpcode.BIRSP_E, H_E, Mux(op == BIRspOpcode.BIRSP_S, H_S, H_I))

    # ---- S2M channels: arbitrary ready; what arrives ---------------------------------------
    def _s2m(self, m):
        h, dut = self.h, self.dut
        ndr, drs, bis = dut.s2m_ndr, dut.s2m_drs, dut.s2m_bisnp
        m.d.comb += [ndr.ready.eq(free(m, 1, "ndr_ready")),
                     drs.ready.eq(free(m, 1, "drs_ready")),
                     bis.ready.eq(free(m, 1, "bisnp_ready"))]
        h.ndr_fire = Signal(name="ndr_fire")
        h.drs_fire = Signal(name="drs_fire")
        h.bis_fire = Signal(name="bisnp_fire")
        m.d.comb += [h.ndr_fire.eq(ndr.valid & ndr.ready), h.drs_fire.eq(drs.valid & drs.ready),
                     h.bis_fire.eq(bis.valid & bis.ready)]
        h.ndr_op = ndr.payload.hdr.opcode
        h.ndr_tag = ndr.payload.hdr.tag
        h.ndr_ack = Signal(name="ndr_is_ack")
        m.d.comb += h.ndr_ack.eq(h.ndr_tag >= h.nl)
        h.ndr_idx = Signal(h.idx, name="ndr_idx")
        m.d.comb += h.ndr_idx.eq(Mux(h.ndr_ack, h.ndr_tag - h.nl, h.ndr_tag))
        h.drs_tag = drs.payload.hdr.tag
        h.drs_idx = Signal(h.idx, name="drs_idx")
        m.d.comb += h.drs_idx.eq(h.drs_tag)
        h.bis_tag = bis.payload.hdr.bi_tag
        h.bis_op = bis.payload.hdr.opcode
        h.bis_hit, h.bis_idx = self.index_of(m, bis.payload.hdr.addr, "bisnp")
        h.served = dut.obs_req_served
        h.srv_hit, h.srv_idx = self.index_of(m, dut.obs_req_served_line, "served")

    # ---- the properties ------------------------------------------------------------------
    def _checks(self, m):
        p, h, dut = self.props, self.h, self.dut
        nl, nt = h.nl, h.nt
        bit = lambda v, i: v.bit_select(i, 1)     # noqa: E731
        # answers the host gets are ones it expects
        p.check(m, "host.ndr_expected", ~h.ndr_fire | (
            (h.ndr_tag < 2 * nl) &
            Mux(h.ndr_ack, bit(h.conf, h.ndr_idx) & (h.ndr_op == NDROpcode.BI_CONFLICT_ACK),
                bit(h.pend, h.ndr_idx) & bit(h.xndr, h.ndr_idx) &
                (h.ndr_op == h.xop[h.ndr_idx]) &
                (bit(h.srv, h.ndr_idx) | ~bit(h.preq, h.ndr_idx)))))
        p.check(m, "host.drs_expected", ~h.drs_fire | (
            (h.drs_tag < nl) & bit(h.pend, h.drs_idx) & bit(h.xdrs, h.drs_idx) &
            bit(h.srv, h.drs_idx) & (dut.s2m_drs.payload.hdr.opcode == DRSOpcode.MEM_DATA)))
        p.check(m, "host.served_once", ~h.served | (
            h.srv_hit & bit(h.pend, h.srv_idx) & bit(h.preq, h.srv_idx) &
            (bit(h.acc, h.srv_idx) | (h.req_fire & (h.rq.idx == h.srv_idx))) &
            ~bit(h.srv, h.srv_idx)))
        # rule 7: BISnp tags
        bis_in = Signal(name="bisnp_tag_in_range")
        m.d.comb += bis_in.eq(h.bis_tag < nt)
        br_tag_is = lambda t: h.br_v & (h.bq.tag == t)      # noqa: E731
        p.check(m, "rule7.bisnp_tag_range", ~h.bis_fire | bis_in)
        p.check(m, "rule7.bisnp_tag_not_outstanding", ~h.bis_fire | ~bis_in | (
            ~bit(h.sv, h.bis_tag) & ~br_tag_is(h.bis_tag)))
        p.check(m, "rule7.bisnp_tag_allocated", ~h.bis_fire | ~bis_in |
                bit(dut.obs_trk_valid, h.bis_tag))
        p.check(m, "rule7.bisnp_one_per_line", ~h.bis_fire | ~h.bis_hit | (
            ~self.holds_snoop(h.bis_idx) & ~(h.br_v & (h.bq.idx == h.bis_idx))))
        p.check(m, "host.bisnp_line", ~h.bis_fire | h.bis_hit)
        p.check(m, "host.bisnp_opcode", ~h.bis_fire | (
            (h.bis_op == BISnpOpcode.BISNP_INV) | (h.bis_op == BISnpOpcode.BISNP_DATA) |
            (h.bis_op == BISnpOpcode.BISNP_CUR)))
        for t in range(nt):
            p.check(m, f"rule7.tracker_holds_tag{t}", ~(h.sv[t] | br_tag_is(t)) |
                    dut.obs_trk_valid[t])
        p.check(m, "rule7.birsp_answers_outstanding", ~h.br_fire |
                bit(dut.obs_trk_valid, h.bq.tag))
        bad_err = Cat(dut.err_code == c for c in (
            DcohError.ILLEGAL_REQ, DcohError.ILLEGAL_RWD, DcohError.BIRSP_TAG,
            DcohError.BIRSP_KIND, DcohError.NXM, DcohError.REFUSED)).any()
        p.check(m, "rule7.no_protocol_error", ~dut.err | ~bad_err)
        p.check(m, "rule1.no_sf_miss_owned_obs", ~dut.err | (h.obs_line != dut.err_addr) |
                (dut.err_code != DcohError.SF_MISS_OWNED))
        # rule 1, rule 5, rule 6
        p.check(m, "rule1.sf_state_valid", dut.obs_sf_state != 3)
        p.check(m, "rule1.sf_inclusive", dut.obs_sf_state >= h.hs)
        p.check(m, "rule5.bi_blocking", ~(h.served & (dut.obs_req_served_line == h.obs_line) &
                                          dut.obs_bisnp_pending))
        h.ack_obs = h.ndr_fire & h.ndr_ack & (h.ndr_idx == h.obs)
        p.check(m, "rule6.ack_after_cmp", ~h.ack_obs | ~h.owed)

    # ---- state updates -------------------------------------------------------------------
    def _updates(self, m):
        h = self.h
        nl, nt = h.nl, h.nt
        r, w = h.r, h.w
        ndr_op, drs_op, grant_e, down_s, drop_i = req_expect(r.op, r.snp, r.mf, r.mv)
        served_obs = h.served & h.srv_hit & (h.srv_idx == h.obs)
        cmp_obs = h.ndr_fire & ~h.ndr_ack & (h.ndr_idx == h.obs)
        m.d.sync += h.owed.eq((h.owed & ~cmp_obs) | (served_obs & h.xndr.bit_select(h.obs, 1)))
        for i in range(nl):
            ndr_i = h.ndr_fire & ~h.ndr_ack & (h.ndr_idx == i)
            drs_i = h.drs_fire & (h.drs_idx == i)
            xndr_n = h.xndr[i] & ~ndr_i
            xdrs_n = h.xdrs[i] & ~drs_i
            with m.If(h.new_req_line & (r.idx == i)):
                m.d.sync += [h.pend[i].eq(1), h.preq[i].eq(1), h.xndr[i].eq(1),
                             h.xdrs[i].eq(drs_op), h.xop[i].eq(ndr_op), h.acc[i].eq(0),
                             h.srv[i].eq(0)]
            with m.Elif(h.new_wr & (w.idx == i)):
                m.d.sync += [h.pend[i].eq(1), h.preq[i].eq(0), h.xndr[i].eq(1), h.xdrs[i].eq(0),
                             h.xop[i].eq(NDROpcode.CMP), h.acc[i].eq(0), h.srv[i].eq(0)]
            with m.Else():
                done = ~(xndr_n | xdrs_n)
                m.d.sync += [h.xndr[i].eq(xndr_n), h.xdrs[i].eq(xdrs_n),
                             h.pend[i].eq(h.pend[i] & ~done)]
                with m.If(done):
                    m.d.sync += [h.preq[i].eq(0), h.acc[i].eq(0), h.srv[i].eq(0)]
                with m.Else():
                    with m.If(h.req_fire & (h.rq.idx == i) & ~h.req_spec):
                        m.d.sync += h.acc[i].eq(1)
                    with m.If(h.served & h.srv_hit & (h.srv_idx == i)):
                        m.d.sync += h.srv[i].eq(1)
            with m.If(h.new_cf & (w.idx == i)):
                m.d.sync += h.conf[i].eq(1)
            with m.Elif(h.ndr_fire & h.ndr_ack & (h.ndr_idx == i)):
                m.d.sync += h.conf[i].eq(0)
        for t in range(nt):
            with m.If(h.bis_fire & (h.bis_tag == t)):
                pending_req = h.pend.bit_select(h.bis_idx, 1) & h.preq.bit_select(h.bis_idx, 1)
                m.d.sync += [h.sv[t].eq(1), h.sidx[t].eq(h.bis_idx), h.sop[t].eq(h.bis_op),
                             h.sph[t].eq(Mux(pending_req, PH_CONFLICT, PH_READY))]
            with m.Elif(h.new_br & (h.b_tag == t)):
                m.d.sync += h.sv[t].eq(0)
            with m.Elif(h.new_cf & (h.w_tag == t)):
                m.d.sync += h.sph[t].eq(PH_WAIT_ACK)
            with m.Elif(h.ndr_fire & h.ndr_ack & (h.ndr_idx == h.sidx[t]) &
                        (h.sph[t] == PH_WAIT_ACK)):
                m.d.sync += h.sph[t].eq(PH_READY)
        # host state of the observed line: drops when a message announces it, rises on grants
        r_down = Mux(drop_i, H_I, Mux(down_s, smin(h.hs, H_S), h.hs))
        d1 = Mux(h.new_req_line & (r.idx == h.obs), r_down, h.hs)
        d2 = Mux(h.new_wr & h.w_on_obs, h.w_down, d1)
        hs_down = Signal(2, name="h_state_down")
        m.d.comb += hs_down.eq(Mux(h.new_br & (h.b_idx == h.obs),
                                   smin(d2, self.rsp_state(h.b_op)), d2))
        grant = h.ndr_fire & ~h.ndr_ack & (h.ndr_idx == h.obs)
        with m.If(grant & (h.ndr_op == NDROpcode.CMP_E)):
            m.d.sync += h.hs.eq(H_E)
        with m.Elif(grant & (h.ndr_op == NDROpcode.CMP_S)):
            m.d.sync += h.hs.eq(H_S)
        with m.Else():
            m.d.sync += h.hs.eq(hs_down)

    # ---- engines and media ---------------------------------------------------------------
    def _engines(self, m):
        p, h, dut = self.props, self.h, self.dut
        h.dev = {}
        for name, ch, extra in (("rd", dut.dev.rd_req, "op"), ("wr", dut.dev.wr_req, "be_full")):
            lay = data.StructLayout({"id": 4, "idx": h.idx, extra: 1})
            v = Signal(name=f"dev_{name}_valid")
            q = Signal(lay, name=f"dev_{name}_fields")
            m.d.comb += [ch.valid.eq(v), ch.payload.id.eq(q.id),
                         ch.payload.addr.eq(h.line_of[q.idx])]
            if extra == "op":
                m.d.comb += ch.payload.op.eq(q.op)
            else:
                m.d.comb += ch.payload.be.eq(Mux(q.be_full, ALL_BE, 1))
            fire = Signal(name=f"dev_{name}_fire")
            m.d.comb += fire.eq(v & ch.ready)
            go = free(m, 1, f"dev_{name}_go")
            choice = Signal(lay, name=f"dev_{name}_choice")
            m.d.comb += choice.eq(free(m, len(q.as_value()), f"dev_{name}_bits"))
            load = ~v | fire
            p.assume(m, f"env.dev_{name}_id", ~(load & go) | (choice.id < HOST_MEDIA_ID))
            with m.If(load):
                m.d.sync += [v.eq(go), q.eq(choice)]
            h.dev[name] = SimpleNamespace(valid=v, fields=q, fire=fire)
        m.d.comb += [dut.dev.rd_resp.ready.eq(free(m, 1, "dev_rd_resp_ready")),
                     dut.dev.wr_resp.ready.eq(free(m, 1, "dev_wr_resp_ready"))]

    def _media(self, m):
        """In-order responder per direction, up to max_reads / max_writes outstanding; each
    response's err (and a read's poison bit) is free, held while the response waits."""
        h, dut, cfg = self.h, self.dut, self.cfg
        h.media = {}
        for name, req, resp, depth in (("rd", dut.mem.rd_req, dut.mem.rd_resp, cfg.max_reads),
                                       ("wr", dut.mem.wr_req, dut.mem.wr_resp, cfg.max_writes)):
            ids = [Signal(4, name=f"media_{name}_id{k}") for k in range(depth)]
            cnt = Signal(range(depth + 1), name=f"media_{name}_count")
            shown = Signal(name=f"media_{name}_shown")      # response valid, not yet taken
            err_q = Signal(name=f"media_{name}_err_q")
            err_free = free(m, 1, f"media_{name}_err")
            accept = free(m, 1, f"media_{name}_accept")
            go = free(m, 1, f"media_{name}_go")
            m.d.comb += req.ready.eq(accept & (cnt != depth))
            push = req.valid & req.ready
            m.d.comb += resp.valid.eq((cnt != 0) & (go | shown))
            pop = resp.valid & resp.ready
            err = Mux(shown, err_q, err_free)
            m.d.comb += [resp.payload.id.eq(ids[0]), resp.payload.err.eq(err)]
            m.d.sync += [shown.eq(resp.valid & ~resp.ready), err_q.eq(err)]
            if name == "rd":      # the media's poison bit of the line: any value, held like err
                poison_q = Signal(name="media_rd_poison_q")
                poison = Mux(shown, poison_q, free(m, 1, "media_rd_poison"))
                m.d.comb += resp.payload.poison.eq(poison)
                m.d.sync += poison_q.eq(poison)
            c1 = cnt - pop
            for k in range(depth):
                nxt = Mux(pop, ids[k + 1] if k + 1 < depth else 0, ids[k])
                m.d.sync += ids[k].eq(Mux(push & (c1 == k), req.payload.id, nxt))
            m.d.sync += cnt.eq(c1 + push)
            h.media[name] = SimpleNamespace(count=cnt, ids=ids, shown=shown, depth=depth)

    def _stream_checks(self, m):
        p, dut = self.props, self.dut
        for name, st, fields in (
                # dev_load is a live load indication (it follows the host reads in flight
                # while a message waits), so it is left out
                ("ndr", dut.s2m_ndr, lambda pl: Cat(pl.hdr.opcode, pl.hdr.meta_field,
                                                    pl.hdr.meta_value, pl.hdr.tag)),
                ("drs", dut.s2m_drs, lambda pl: Cat(pl.hdr.opcode, pl.hdr.meta_field,
                                                    pl.hdr.meta_value, pl.hdr.tag,
                                                    pl.hdr.poison)),
                ("bisnp", dut.s2m_bisnp, lambda pl: pl.hdr.as_value()),
                ("mem_rd", dut.mem.rd_req, lambda pl: pl.as_value()),
                ("mem_wr", dut.mem.wr_req, lambda pl: Cat(pl.id, pl.addr)),
                ("dev_rd_resp", dut.dev.rd_resp, lambda pl: Cat(pl.id, pl.err)),
                ("dev_wr_resp", dut.dev.wr_resp, lambda pl: pl.as_value())):
            val = fields(st.payload)
            held = Signal(name=f"stream_{name}_held")
            prev = Signal(len(val), name=f"stream_{name}_prev")
            m.d.sync += [held.eq(st.valid & ~st.ready), prev.eq(val)]
            p.check(m, f"stream.{name}_stable", ~held | (st.valid & (val == prev)))

    # ---- helper invariants for k-induction -----------------------------------------------
    def _helpers(self, m):
        from .invariants import add_invariants
        add_invariants(self, m)

    # ---- reachability and names ----------------------------------------------------------
    def _covers(self, m):
        p, h, dut = self.props, self.h, self.dut
        p.cover(m, "cover.obs_held_E", h.hs == H_E)
        p.cover(m, "cover.bisnp_to_obs", h.bis_fire & h.bis_hit & (h.bis_idx == h.obs))
        p.cover(m, "cover.conflict_ack_after_cmp", h.ack_obs & h.pend.bit_select(h.obs, 1) &
                ~h.xndr.bit_select(h.obs, 1))
        p.cover(m, "cover.two_tags_outstanding", dut.obs_trk_valid.all())
        p.cover(m, "cover.ack_before_cmp", h.ack_obs & h.pend.bit_select(h.obs, 1) &
                h.preq.bit_select(h.obs, 1) & ~h.srv.bit_select(h.obs, 1))
        it = self.internals
        # (internal signals: victim BISnp allocated by the host lane, a parked Req served)
        p.cover(m, "cover.victim_bisnp", it.signal("host/h_do") & it.signal("host/h_alloc"))
        from hw.dcoh.host_lane import SRC_PARK
        p.cover(m, "cover.parked_req_served", h.served & (it.signal("host/src") == SRC_PARK))
        # a Req decided while the park slots could not take it, served from its channel
        p.cover(m, "cover.peeked_req_served", h.served & it.signal("host/ev_peek"))

    def _trace_names(self, m):
        h, dut = self.h, self.dut
        for name, value in (("sf_state", dut.obs_sf_state),
                            ("bisnp_pending", dut.obs_bisnp_pending), ("served", h.served),
                            ("served_line", dut.obs_req_served_line),
                            ("trk_valid", dut.obs_trk_valid),
                            ("req_op", h.rq.op), ("req_snp", h.rq.snp), ("req_mv", h.rq.mv),
                            ("req_idx", h.rq.idx),
                            ("rwd_conflict", h.wq.conflict), ("rwd_idx", h.wq.idx),
                            ("rwd_mf", h.wq.mf), ("rwd_mv", h.wq.mv),
                            ("birsp_op", h.bq.op), ("birsp_tag", h.bq.tag),
                            ("ndr_valid", dut.s2m_ndr.valid), ("ndr_op", h.ndr_op),
                            ("ndr_tag", h.ndr_tag), ("drs_valid", dut.s2m_drs.valid),
                            ("drs_tag", h.drs_tag), ("bisnp_valid", dut.s2m_bisnp.valid),
                            ("bisnp_op", h.bis_op), ("bisnp_tag", h.bis_tag),
                            ("bisnp_line", dut.s2m_bisnp.payload.hdr.addr),
                            ("dev_rd_op", h.dev["rd"].fields.op),
                            ("dev_rd_idx", h.dev["rd"].fields.idx),
                            ("dev_wr_idx", h.dev["wr"].fields.idx),
                            ("mem_rd_valid", dut.mem.rd_req.valid),
                            ("mem_rd_ready", dut.mem.rd_req.ready),
                            ("mem_rd_resp_valid", dut.mem.rd_resp.valid),
                            ("mem_rd_resp_ready", dut.mem.rd_resp.ready),
                            ("mem_wr_valid", dut.mem.wr_req.valid),
                            ("mem_wr_ready", dut.mem.wr_req.ready),
                            ("mem_wr_resp_valid", dut.mem.wr_resp.valid),
                            ("mem_wr_resp_ready", dut.mem.wr_resp.ready),
                            ("dut_err", dut.err), ("dut_err_code", dut.err_code)):
            s = Signal.like(value, name=f"t_{name}")
            m.d.comb += s.eq(value)


TRACE = ["obs_idx", "obs_line", "h_state", "t_sf_state", "t_bisnp_pending", "t_served",
         "t_served_line", "t_trk_valid", "h_cmp_owed", "h_pend", "h_preq", "h_xndr", "h_xdrs",
         "h_acc", "h_srv", "h_conf", "h_snp_valid", "h_snp_idx0", "h_snp_idx1",
         "h_snp_phase0", "h_snp_phase1",
         "req_valid", "req_fire", "t_req_op", "t_req_snp", "t_req_mv", "t_req_idx",
         "rwd_valid", "rwd_fire", "t_rwd_conflict", "t_rwd_mf", "t_rwd_mv", "t_rwd_idx",
         "birsp_valid", "birsp_fire", "t_birsp_op", "t_birsp_tag",
         "t_ndr_valid", "ndr_fire", "t_ndr_op", "t_ndr_tag", "t_drs_valid", "drs_fire",
         "t_drs_tag", "t_bisnp_valid", "bisnp_fire", "t_bisnp_op", "t_bisnp_tag",
         "t_bisnp_line", "dev_rd_valid", "dev_rd_fire", "t_dev_rd_op", "t_dev_rd_idx",
         "dev_wr_valid", "dev_wr_fire", "t_dev_wr_idx",
         "t_mem_rd_valid", "t_mem_rd_ready", "t_mem_rd_resp_valid", "t_mem_rd_resp_ready",
         "t_mem_wr_valid", "t_mem_wr_ready", "t_mem_wr_resp_valid", "t_mem_wr_resp_ready",
         "t_dut_err", "t_dut_err_code"]


def build(broken=None, **_):
    """The design for :mod:`trainingcxl.formal`."""
    cfg = reduced_config()
    # A broken variant runs without the helper invariants, so its counterexample is against a
    # property itself (and not an invariant that merely notices the bug first).
    top = FormalHarness(cfg, broken=broken, helpers=broken is None)
    keys = ("addr_bits", "sf_sets", "sf_ways", "bi_tags", "park_slots", "host_reads",
            "host_writes", "wr_buckets", "max_reads", "max_writes")
    return {"top": top, "name": HARNESS_NAME, "props": top.props, "trace": TRACE,
            "k": K_INDUCTION, "cover_depth": 20, "tasks": ["bmc", "prove", "cover"],
            "config": {**{k: getattr(cfg, k) for k in keys},
                       "host_lines": list(HOST_LINES)}}
