"""Helper invariants that make k-induction of the DCOH harness go through.

k-induction starts from any state in which the assertions held for k steps; a state the DCOH
and its environment can never reach (a Cmp in the NDR FIFO for a Req nobody sent, a tracker
entry whose BISnp is nowhere, ...) can then break a property. Each ``helper.*`` assertion below
rules such states out. They are assertions like the properties: proved, never assumed, so a
wrong one fails the proof rather than hiding a bug.

Vocabulary: a host transaction is a *token* that is in exactly one place at a time:

- a Req: the host's Req register (``pend & preq & ~acc``; also while the host lane decides it
  without taking it, *peeked*), then the host lane's decision register or a park slot
  (``acc & ~srv``), then, once served, its Cmp in the NDR FIFO (``srv & xndr``) and, for
  reads, its DRS in the host read lane FIFO or the read context FIFO (``srv & xdrs``);
- a MemWr: the host's RwD register, the decision register, the write queue or the write
  context FIFO (``pend & ~preq``);
- a BIConflict: the RwD register, the decision register or its ack in the NDR FIFO
  (``conf``);
- a BISnp (tracker entry ``t``): the BISnp FIFO, the host (``sv[t]``), the host's BIRsp
  register or the decision register.

Plus the snoop filter holds only host lines, once; the rule-1 timing (a pending Cmp-E/Cmp-S
grant has its SF state already, a message the host sent announces its state); the context FIFOs
line up with the media's queues; the write-bucket counters count what is in flight.
"""
from amaranth.hdl import Array, Cat, Mux
from amaranth.lib import data

from ..cxl_encodings import (BISnpOpcode, DcohError, HOST_MEDIA_ID, MetaField, NDROpcode,
                             ReqOpcode, RwDOpcode, SnpType)
from ..dcoh.host_lane import SRC_NONE, SRC_BIRSP, SRC_RWD, SRC_PARK, SRC_REQ, park_layout
from .dut import MissingInternal
from ..dcoh.routing import host_read_layout, device_read_layout, write_layout, ndr_entry_layout

__all__ = ["add_invariants"]

SF_I, SF_S, SF_A = 0, 1, 2
H_I, H_S, H_E = 0, 1, 2
PH_CONFLICT, PH_WAIT_ACK, PH_READY = 0, 1, 2


def _count(bits):
    bits = list(bits)
    total = 0
    for b in bits:
        total = total + b.as_unsigned()
    return total


def add_invariants(hn, m):
    from .harness import legal_req, meta_state, req_expect
    p, h, dut, it, cfg = hn.props, hn.h, hn.dut, hn.internals, hn.cfg
    nl, nt, lb = h.nl, h.nt, h.lb
    hb = (cfg.wr_buckets - 1).bit_length()
    lines = hn.lines
    bit = lambda v, i: v.bit_select(i, 1)     # noqa: E731

    def chk(name, cond):
        p.check(m, "helper." + name, cond)

    def is_host_line(line):
        return Cat(line == ln for ln in lines).any()

    # ---- layouts of the DCOH's FIFO words (as hw.dcoh packs them); path of each FIFO
    layouts = {
        "h_rd": host_read_layout(lb),
        "d_rd": device_read_layout(lb),
        "wr_q": write_layout(lb),
        "ndr_h": ndr_entry_layout(),
        "bisnp": data.StructLayout({"opcode": 4, "tag": 12, "line": lb}),
        "rd_ctx": data.StructLayout({"host": 1, "tag": 16}),
        "wr_ctx": data.StructLayout({"host": 1, "tag": 16, "bucket": max(hb, 1)}),
    }
    paths = {"rd_ctx": "routing/rd_ctx", "wr_ctx": "routing/wr_ctx"}
    q = {}
    for name, lay in layouts.items():
        f = it.fifo(paths.get(name, name))
        if f.width != lay.size:
            raise MissingInternal(f"DCOH FIFO {name} is {f.width} bits wide, the harness "
                                  f"expects {lay.size}: update hw/formal/invariants.py")
        q[name] = [(v, lay(d)) for v, d in f.entries()]
    drs_nxm = it.fifo("drs_nxm")

    pend_req = h.pend & h.preq
    unserved = pend_req & h.acc & ~h.srv          # parked
    in_reg = pend_req & ~h.acc                    # still in the host's Req register
    cmp_due = pend_req & h.srv & h.xndr           # Cmp in the NDR FIFO
    drs_due = pend_req & h.srv & h.xdrs           # DRS on its way from the media
    wr_due = h.pend & ~h.preq                     # MemWr on its way
    ready = dut.ready

    # ---- the host lane's decision register: one event taken off its channel (or out of its
    # park slot), not yet done
    src = it.signal("host/src")
    park_l = data.StructLayout({"opcode": 4, "snp": 3, "mf": 2, "mv": 2, "tag": 16, "line": lb,
                                "hi_bad": 1})
    if park_layout(lb).size != park_l.size or len(it.signal("host/ev")) != park_l.size:
        raise MissingInternal("the host lane's event layout changed: update "
                              "hw/formal/invariants.py")
    ev = park_l(it.signal("host/ev"))
    ib = (nl - 1).bit_length()
    ev_idx = ev.tag[:ib]
    ev_at_line = (ev.tag < nl) & (ev.line == h.line_of[ev_idx]) & ~ev.hi_bad
    peek = it.signal("host/ev_peek")      # a Req decided from the channel, not yet taken
    chk("decide.peek_req", ~peek | (src == SRC_REQ))
    # a transaction's Req taken off the channel
    b_req = (src == SRC_REQ) & ~peek & (ev.opcode != ReqOpcode.MEM_SPEC_RD)
    b_cf = (src == SRC_RWD) & (ev.opcode == RwDOpcode.BI_CONFLICT)
    b_wr = (src == SRC_RWD) & (ev.opcode != RwDOpcode.BI_CONFLICT)
    b_br = src == SRC_BIRSP
    b_tag = it.signal("host/ev_bi_tag")

    # ---- host bookkeeping is well formed
    chk("host_state_range", h.hs != 3)
    for i in range(nl):
        chk(f"line{i}.idle_clean", h.pend[i] | ~(h.preq[i] | h.xndr[i] | h.xdrs[i] | h.acc[i] |
                                                 h.srv[i]))
        chk(f"line{i}.write_shape", ~wr_due[i] | (h.xndr[i] & ~h.xdrs[i] & ~h.acc[i] &
                                                  ~h.srv[i] & (h.xop[i] == NDROpcode.CMP)))
        chk(f"line{i}.req_shape", ~pend_req[i] | (
            (h.xndr[i] | h.xdrs[i]) & (~h.srv[i] | h.acc[i]) & (h.srv[i] | h.xndr[i]) &
            (h.xop[i] != 3) & ~((h.xop[i] == NDROpcode.CMP_S) & ~h.srv[i] & ~h.xdrs[i])))
    for t in range(nt):
        chk(f"tag{t}.phase_range", ~h.sv[t] | (h.sph[t] != 3))
        chk(f"tag{t}.snoop_opcode", ~h.sv[t] | (h.sop[t] == BISnpOpcode.BISNP_INV) |
            (h.sop[t] == BISnpOpcode.BISNP_DATA) | (h.sop[t] == BISnpOpcode.BISNP_CUR))
        ci = bit(h.conf, h.sidx[t])
        chk(f"tag{t}.phase_conflict", ~h.sv[t] | Mux(h.sph[t] == PH_WAIT_ACK, ci, ~ci))
        # once the host may answer, a Req of that line served before is fully granted
        chk(f"tag{t}.ready_after_cmp", ~h.sv[t] | (h.sph[t] != PH_READY) |
            ~bit(cmp_due, h.sidx[t]))
        for u in range(t + 1, nt):
            chk(f"tags{t}{u}.distinct_lines", ~(h.sv[t] & h.sv[u]) | (h.sidx[t] != h.sidx[u]))
        chk(f"tag{t}.birsp_line_distinct", ~(h.sv[t] & h.br_v) | (h.sidx[t] != h.bq.idx))
    chk("birsp_not_held", ~h.br_v | ~bit(h.sv, h.bq.tag))
    for i in range(nl):
        waiting = [h.sv[t] & (h.sidx[t] == i) & (h.sph[t] == PH_WAIT_ACK) for t in range(nt)]
        chk(f"line{i}.conflict_has_snoop", ~h.conf[i] | Cat(waiting).any())
    chk("owed_is_cmp_due", h.owed == bit(cmp_due, h.obs))

    # ---- the host's M2S registers
    r_ndr, r_drs, r_own, r_rds, r_drop = req_expect(h.rq.op, h.rq.snp, h.rq.mf, h.rq.mv)
    chk("req_reg.legal", ~h.req_v | legal_req(h.rq.op, h.rq.snp, h.rq.mf, h.rq.mv))
    chk("req_reg.token", ~h.req_v | h.req_spec | (
        bit(in_reg, h.rq.idx) & (h.xop[h.rq.idx] == r_ndr) & (bit(h.xdrs, h.rq.idx) == r_drs)))
    for i in range(nl):
        chk(f"line{i}.req_in_register", ~in_reg[i] | (h.req_v & ~h.req_spec & (h.rq.idx == i)))
    wq = h.wq
    chk("rwd_reg.write_token", ~h.rwd_is_wr | (
        bit(wr_due, wq.idx) & ((wq.mf == MetaField.NO_OP) |
                               ((wq.mf == MetaField.META0_STATE) & (wq.mv != 1)))))
    chk("rwd_reg.conflict_token", ~h.rwd_is_cf | bit(h.conf, wq.idx))

    # ---- park slots
    pk_valid = it.signal("host/pk_valid")
    parks = []
    for k in range(cfg.park_slots):
        s = it.signal(f"host/park{k}")
        if len(s) != park_l.size:
            raise MissingInternal(f"park slot layout changed ({len(s)} bits)")
        pk = park_l(s)
        parks.append((pk_valid[k], pk))
        e_ndr, e_drs, *_ = req_expect(pk.opcode, pk.snp, pk.mf, pk.mv)
        idx = pk.tag[:(nl - 1).bit_length()]
        chk(f"park{k}.token", ~pk_valid[k] | (
            (pk.tag < nl) & (pk.line == h.line_of[idx]) & ~pk.hi_bad &
            legal_req(pk.opcode, pk.snp, pk.mf, pk.mv) & (pk.opcode != ReqOpcode.MEM_SPEC_RD) &
            bit(unserved, idx) &
            (h.xop[idx] == e_ndr) & (bit(h.xdrs, idx) == e_drs)))
        for j in range(k):
            chk(f"parks{j}{k}.distinct", ~(pk_valid[k] & pk_valid[j]) |
                (parks[j][1].tag != pk.tag))
    for i in range(nl):
        chk(f"line{i}.parked", ~unserved[i] | (b_req & (ev.tag == i)) |
            Cat(v & (pk.tag == i) for v, pk in parks).any())

    # ---- the decision register's event is the token it names
    e_ndr, e_drs, *_ = req_expect(ev.opcode, ev.snp, ev.mf, ev.mv)
    chk("decide.req_token", (src != SRC_REQ) | peek | (
        ev_at_line & legal_req(ev.opcode, ev.snp, ev.mf, ev.mv) &
        ((ev.opcode == ReqOpcode.MEM_SPEC_RD) |
         (bit(unserved, ev_idx) & (h.xop[ev_idx] == e_ndr) & (bit(h.xdrs, ev_idx) == e_drs)))))
    chk("decide.peek_is_req_reg", ~peek | (
        h.req_v & ev_at_line & (ev_idx == h.rq.idx) & (ev.opcode == h.rq.op) &
        (ev.snp == h.rq.snp) & (ev.mf == h.rq.mf) & (ev.mv == h.rq.mv)))
    for k, (v, pk) in enumerate(parks):
        chk(f"decide.req_not_parked{k}", ~(b_req & v) | (pk.tag != ev.tag))
    slot = it.signal("host/ev_slot")
    pk_ready = it.signal("host/pk_ready")
    chk("decide.park_slot", (src != SRC_PARK) | (
        (slot < cfg.park_slots) & bit(pk_valid, slot) & ~bit(pk_ready, slot) &
        (Array(it.signal(f"host/park{k}") for k in range(cfg.park_slots))[slot] ==
         ev.as_value())))
    chk("decide.write_token", ~b_wr | (
        ((ev.opcode == RwDOpcode.MEM_WR) | (ev.opcode == RwDOpcode.MEM_WR_PTL)) &
        (ev.snp == SnpType.NO_OP) & ev_at_line & bit(wr_due, ev_idx) &
        ((ev.mf == MetaField.NO_OP) | ((ev.mf == MetaField.META0_STATE) & (ev.mv != 1)))))
    cf_idx = (ev.tag - nl)[:ib]
    chk("decide.conflict_token", ~b_cf | (
        (ev.tag >= nl) & (ev.tag < 2 * nl) & (ev.line == h.line_of[cf_idx]) & ~ev.hi_bad &
        bit(h.conf, cf_idx)))
    trk_valid = it.signal("trk/valid")
    trk_line = [it.signal(f"trk/line{t}") for t in range(nt)]
    trk_op = [it.signal(f"trk/op{t}") for t in range(nt)]
    tag_op = it.signal("host/ev_tag_op")
    chk("decide.birsp_token", ~b_br | (
        it.signal("host/ev_tag_ok") & (b_tag < nt) & bit(trk_valid, b_tag) &
        (Array(trk_line)[b_tag] == ev.line) & (Array(trk_op)[b_tag] == tag_op) &
        hn.birsp_allowed(tag_op, ev.opcode)))
    for t in range(nt):
        chk(f"decide.birsp_line_distinct{t}", ~(h.sv[t] & b_br) |
            (h.line_of[h.sidx[t]] != ev.line))
    # a BIRsp on its way (host register, decision register) has no Cmp due on its line: the
    # host answered after its Req's grant, and a later Req waits for the tracker entry
    chk("birsp_reg.after_cmp", ~h.br_v | ~bit(cmp_due, h.bq.idx))
    for i in range(nl):
        chk(f"line{i}.decide_birsp_after_cmp", ~(b_br & (ev.line == h.line_of[i])) |
            ~cmp_due[i])

    # ---- NDR FIFO: Cmps of served Reqs, acks of BIConflicts, in order
    ndr = q["ndr_h"]
    for j, (v, e) in enumerate(ndr):
        idx = e.tag[:(nl - 1).bit_length()]
        ack = e.tag >= nl
        aidx = (e.tag - nl)[:(nl - 1).bit_length()]
        chk(f"ndr{j}.token", ~v | Mux(
            ack, (e.tag < 2 * nl) & (e.opcode == NDROpcode.BI_CONFLICT_ACK) & bit(h.conf, aidx),
            bit(cmp_due, idx) & (e.opcode == h.xop[idx])))
    for i in range(nl):
        cmps = [v & (e.tag == i) for v, e in ndr]
        acks = [v & (e.tag == nl + i) for v, e in ndr]
        chk(f"line{i}.cmp_queued", _count(cmps) == cmp_due[i])
        chk(f"line{i}.conflict_place", _count(acks) + (h.rwd_is_cf & (wq.idx == i)) +
            (b_cf & (ev.tag == nl + i)) == h.conf[i])
        for j in range(len(ndr)):
            for k in range(j + 1, len(ndr)):
                chk(f"line{i}.ndr_order{j}{k}", ~(acks[j] & cmps[k]))

    # ---- reads: host read lane, read contexts, media queue
    med_rd, med_wr = h.media["rd"], h.media["wr"]
    chk("drs_nxm_empty", drs_nxm.level == 0)
    rd_ctx, wr_ctx = it.fifo(paths["rd_ctx"]), it.fifo(paths["wr_ctx"])
    chk("rd_ctx_level", rd_ctx.level == med_rd.count)
    chk("wr_ctx_level", wr_ctx.level == med_wr.count)
    for name, ctx, med in (("rd_ctx", rd_ctx, med_rd), ("wr_ctx", wr_ctx, med_wr)):
        for j in range(med.depth):
            v, word = ctx.queue(j)
            e = layouts[name](word)
            chk(f"{name}{j}.matches_media", ~v | (e.host == (med.ids[j] == HOST_MEDIA_ID)))
    for j, (v, e) in enumerate(q["h_rd"]):
        idx = e.tag[:(nl - 1).bit_length()]
        chk(f"h_rd{j}.token", ~v | ((e.tag < nl) & (e.line == h.line_of[idx]) &
                                    bit(drs_due, idx)))
    for j, (v, e) in enumerate(q["rd_ctx"]):
        idx = e.tag[:(nl - 1).bit_length()]
        chk(f"rd_ctx{j}.token", ~v | ~e.host | ((e.tag < nl) & bit(drs_due, idx)))
    for i in range(nl):
        n = _count([v & (e.tag == i) for v, e in q["h_rd"]] +
                   [v & e.host & (e.tag == i) for v, e in q["rd_ctx"]])
        chk(f"line{i}.drs_place", n == drs_due[i])
    chk("host_reads_count", it.signal("host_rd_inflight") ==
        _count([v for v, _ in q["h_rd"]] + [v & e.host for v, e in q["rd_ctx"]]))

    # ---- writes: the write queue (host and device writes in service order), write contexts,
    # bucket counters
    for j, (v, e) in enumerate(q["wr_q"]):
        idx = e.tag[:(nl - 1).bit_length()]
        chk(f"wr_q{j}.token", ~v | Mux(
            e.host, (e.id == HOST_MEDIA_ID) & (e.tag < nl) & (e.line == h.line_of[idx]) &
            bit(wr_due, idx),
            (e.id < HOST_MEDIA_ID) & is_host_line(e.line)))
    for j, (v, e) in enumerate(q["wr_ctx"]):
        idx = e.tag[:(nl - 1).bit_length()]
        chk(f"wr_ctx{j}.token", ~v | ~e.host | (
            (e.tag < nl) & bit(wr_due, idx) &
            (e.bucket == (h.line_of[idx][:hb] if hb else 0))))
    for i in range(nl):
        n = _count([h.rwd_is_wr & (wq.idx == i), b_wr & (ev.tag == i)] +
                   [v & e.host & (e.tag == i) for v, e in q["wr_q"]] +
                   [v & e.host & (e.tag == i) for v, e in q["wr_ctx"]])
        chk(f"line{i}.write_place", n == wr_due[i])
    chk("host_writes_count", it.signal("host_wr_inflight") ==
        _count([v & e.host for v, e in q["wr_q"] + q["wr_ctx"]]))
    for owner, host in (("host_wb", 1), ("dev_wb", 0)):
        rows = it.bucket_rows(it.sub(owner))
        width = len(rows["issued"][0])
        for b in range(cfg.wr_buckets):
            in_q = _count([v & (e.host == host) & ((e.line[:hb] == b) if hb else 1)
                           for v, e in q["wr_q"]])
            in_ctx = _count([v & (e.host == host) & ((e.bucket == b) if hb else 1)
                             for v, e in q["wr_ctx"]])
            chk(f"{owner}{b}.count", (rows["issued"][b] - rows["retired"][b])[:width] ==
                in_q + in_ctx)

    # ---- device lanes: ids below the host's, host lines only
    for name, dv in h.dev.items():
        chk(f"dev_{name}_reg.id", ~dv.valid | (dv.fields.id < HOST_MEDIA_ID))
    for j, (v, e) in enumerate(q["d_rd"]):
        chk(f"d_rd{j}.shape", ~v | ((e.id < HOST_MEDIA_ID) & is_host_line(e.line)))

    # ---- BISnps: tracker entries, BISnp FIFO, host, BIRsp register
    bq = q["bisnp"]
    for j, (v, e) in enumerate(bq):
        tag_ok = e.tag < nt
        tl, to = Array(trk_line)[e.tag], Array(trk_op)[e.tag]
        chk(f"bisnp{j}.token", ~v | (tag_ok & bit(trk_valid, e.tag) & (tl == e.line) &
                                     (to == e.opcode) & is_host_line(e.line) &
                                     ((e.opcode == BISnpOpcode.BISNP_INV) |
                                      (e.opcode == BISnpOpcode.BISNP_DATA) |
                                      (e.opcode == BISnpOpcode.BISNP_CUR))))
    for t in range(nt):
        n = _count([v & (e.tag == t) for v, e in bq] + [h.sv[t], h.br_v & (h.bq.tag == t),
                                                         b_br & (b_tag == t)])
        chk(f"tag{t}.one_place", n == trk_valid[t])
        chk(f"tag{t}.host_line", ~trk_valid[t] | is_host_line(trk_line[t]))
        chk(f"tag{t}.held_matches", ~h.sv[t] | ((trk_line[t] == h.line_of[h.sidx[t]]) &
                                                 (trk_op[t] == h.sop[t])))
        chk(f"tag{t}.answer_matches", ~(h.br_v & (h.bq.tag == t)) | (
            (trk_line[t] == h.line_of[h.bq.idx]) & hn.birsp_allowed(trk_op[t], h.bq.op)))

    # ---- snoop filter: host lines only, each at most once; rule-1 timing
    rows = it.sf_rows()
    sets = cfg.sf_sets
    sb = (sets - 1).bit_length()
    for s in range(sets):
        ents = []
        for w, way in sorted(rows.items()):
            e = way[s]
            line = (e.tag << sb) | s
            ents.append((e.state != SF_I, line))
            chk(f"sf{s}{w}.state_range", e.state != 3)
            chk(f"sf{s}{w}.host_line", (e.state == SF_I) | is_host_line(line))
            chk(f"sf{s}{w}.idle_when_init", ready | (e.state == SF_I))
        for a in range(len(ents)):
            for b in range(a + 1, len(ents)):
                chk(f"sf{s}.ways{a}{b}_distinct", ~(ents[a][0] & ents[b][0]) |
                    (ents[a][1] != ents[b][1]))
    sf_obs = dut.obs_sf_state
    o = h.obs
    chk("rule1.grant_e_recorded", ~(bit(cmp_due, o) & (h.xop[o] == NDROpcode.CMP_E)) |
        (sf_obs == SF_A))
    chk("rule1.grant_s_recorded", ~(bit(cmp_due, o) & (h.xop[o] == NDROpcode.CMP_S)) |
        (sf_obs != SF_I))
    before = bit(pend_req, o) & ~bit(h.srv, o)
    chk("rule1.drop_announced", ~(before & (h.xop[o] == NDROpcode.CMP) & ~bit(h.xdrs, o)) |
        (h.hs == H_I))
    chk("rule1.shared_announced", ~(before & (h.xop[o] == NDROpcode.CMP_S)) | (h.hs <= H_S))
    chk("rule1.write_announced", ~(h.rwd_is_wr & (wq.idx == o) &
                                   (wq.mf == MetaField.META0_STATE)) |
        (h.hs == meta_state(wq.mv)))
    chk("rule1.answer_announced", ~(h.br_v & (h.bq.idx == o)) |
        (h.hs <= hn.rsp_state(h.bq.op)))
    chk("rule1.decide_write_announced", ~(b_wr & (ev_idx == o) &
                                          (ev.mf == MetaField.META0_STATE)) |
        (h.hs == meta_state(ev.mv)))
    chk("rule1.decide_answer_announced", ~(b_br & (ev.line == h.obs_line)) |
        (h.hs <= hn.rsp_state(ev.opcode)))

    # ---- merges hold a grant only while that input still offers
    for name in ("routing/rd_merge", "routing/ndr_merge", "routing/drs_merge"):
        mg = it.sub(name)
        hold, held_b = it.signal(f"{name}/hold"), it.signal(f"{name}/held_b")
        chk(f"{name}.hold", ~hold | Mux(held_b, mg.b.valid, mg.a.valid))

    # ---- media consistent, nothing before the SF is ready
    for name, med in (("rd", med_rd), ("wr", med_wr)):
        chk(f"media_{name}.count_range", med.count <= med.depth)
        chk(f"media_{name}.shown", ~med.shown | (med.count != 0))
        chk(f"media_{name}.ids", Cat((k >= med.count) | (med.ids[k] <= HOST_MEDIA_ID)
                                     for k in range(med.depth)).all())
    chk("init_quiet", ready | (
        (h.acc == 0) & (h.srv == 0) & (h.hs == H_I) & (h.sv == 0) & (h.conf == 0) &
        (trk_valid == 0) & (pk_valid == 0) & (src == SRC_NONE) & (med_rd.count == 0) &
        (med_wr.count == 0) &
        ~h.br_v & (dut.err == 0) &
        Cat(it.fifo(paths.get(n, n)).level == 0 for n in ("h_rd", "d_rd", "wr_q", "ndr_h",
                                                            "drs_nxm", "bisnp", "rd_ctx",
                                                            "wr_ctx")).all()))
    chk("err_code_known", ~dut.err | (dut.err_code == DcohError.MEDIA) |
        (dut.err_code == DcohError.SF_MISS_OWNED))
