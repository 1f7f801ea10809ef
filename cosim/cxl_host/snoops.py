"""The snoop side of :class:`~cosim.cxl_host.core.HostCore`: BISnp handling, BIConflict handshakes,
writebacks before BIRsp, and the snoop answers from each host state.

A mixin: the state it works on (``lines``, ``txns``, queues, stats) is created by
``HostCore.__init__``."""
from __future__ import annotations

from hw.cxl_encodings import (
    BIRspOpcode as BR, BISnpOpcode as BS, MetaField as MF, MetaValue as MV, RwDOpcode as RW,
    SnpType as ST,
)
from .protocol import (
    _birsp_payload, _BISNP_KNOWN, Conflict, _fmt, _Line, _name, _REQ, _RWD, _rwd_payload,
    Snoop, Txn, ZERO_LINE,
)


class HostSnoops:
    """The snoop side of HostCore (a mixin: ``HostCore`` supplies the state)."""

    # ------------------------------------------------------------------ snoops
    def on_bisnp(self, msg: dict, cycle: int):
        if self.trace:
            self.trace(f"{cycle} <- s2m_bisnp {_fmt('s2m_bisnp', msg)}")
        self.now = max(self.now, cycle)
        self.stats["recv_s2m_bisnp"] += 1
        h = msg["hdr"]
        if self.observers:
            self._notify("on_s2m", "s2m_bisnp", msg, cycle, None)
        op, bi_tag, bi_id, addr = h["opcode"], h["bi_tag"], h["bi_id"], h["addr"]
        if op not in (BS.BISNP_CUR, BS.BISNP_DATA, BS.BISNP_INV):
            self.violation("bisnp_opcode", f"BISnp opcode {_name(BS, op)} (bi_tag {bi_tag})",
                           addr)
        if self.bi_tags is not None and bi_tag >= self.bi_tags:
            self.violation("rule7", f"BISnp bi_tag {bi_tag} >= bi_tags {self.bi_tags}", addr)
        if bi_id != 0:
            self.violation("bisnp_fields", f"BISnp bi_id {bi_id} (expected 0)", addr)
        prev = self.open_bitags.get(bi_tag)
        if prev is not None:
            self.violation("rule7", f"BISnp bi_tag {bi_tag} for line {addr:#x} while bi_tag "
                           f"{bi_tag} (line {prev.line:#x}, arrived {prev.t_arrive}) has no "
                           "BIRsp transferred yet", addr)
        ln = self.lines.get(addr)
        sn = Snoop(bi_tag=bi_tag, bi_id=bi_id, opcode=op, line=addr, t_arrive=cycle)
        self.open_bitags[bi_tag] = sn
        if len(self.open_bitags) > self.stats["max_open_bisnp"]:
            self.stats["max_open_bisnp"] = len(self.open_bitags)
        if ln is None:
            self.violation("bisnp_line", f"BISnp {_name(BS, op)} for line {addr:#x} the host "
                           "never requested", addr)
            ln = self.add_line(addr)
        elif ln.n_acquired == 0 and ln.state == "I" and ln.pending is None:
            # the snoop filter can only hold lines the host asked to cache
            self.violation("bisnp_line", f"BISnp {_name(BS, op)} for line {addr:#x} the host "
                           "never cached", addr)
        ln.open_snoops.append(sn)
        if ln.snoop is not None:
            self.violation("bisnp_dup", f"second BISnp for line {addr:#x} (bi_tags "
                           f"{ln.snoop.bi_tag}, {bi_tag}) before the first was answered", addr)
            # answer the new one after the old one
            self._after(1, self._requeue_snoop, sn)
            return
        ln.snoop = sn
        k = self.knobs
        d = self.rng.randint(min(k.snoop_delay_min, k.snoop_delay_max), k.snoop_delay_max) \
            if k.snoop_delay_max else 0
        if d:
            self._after(d, self._process_snoop, sn)
        else:
            self._process_snoop(sn)

    def _requeue_snoop(self, sn: Snoop):
        ln = self.lines[sn.line]
        if ln.snoop is None:
            ln.snoop = sn
            self._process_snoop(sn)
        else:
            self._after(1, self._requeue_snoop, sn)

    def _process_snoop(self, sn: Snoop):
        ln = self.lines[sn.line]
        if sn.state == "answered":
            return
        pend = ln.pending
        if pend is not None:
            if pend.channel == _REQ:
                if sn.state == "queued":
                    self._send_conflict(ln, sn, pend)
                    return
                if sn.state in ("conflict", "wait_req"):
                    sn.state = "wait_req"
                    return          # answered when the Req completes
            else:
                sn.state = "wait_write" if sn.wb is None else "wait_wb"
                return              # answered after the write's Cmp
        self._answer_snoop(ln, sn)

    def _answer_snoop(self, ln: _Line, sn: Snoop):
        """Answer from the current state; a dirty line is written back first."""
        r = self.rng
        st = ln.state
        op = sn.opcode
        if st == "M":
            if op == BS.BISNP_INV or op not in (BS.BISNP_DATA, BS.BISNP_CUR):
                kind = "wb_drop"
            elif op == BS.BISNP_DATA:
                kind = "wb_keep_s" if r.random() < self.knobs.keep_on_bisnp_data else "wb_drop"
            else:
                x = r.random()
                keep = self.knobs.keep_on_bisnp_cur
                kind = ("wb_keep_e" if x < keep / 2 else "wb_keep_s" if x < keep
                        else "wb_drop")
            sn.state = "wait_wb"
            ln.snoop = None      # issue() refuses lines with a snoop in progress
            try:
                sn.wb = self.issue(kind, ln.addr)
            finally:
                ln.snoop = sn
            sn.wb.snoop = sn
            self.stats["snoop_writebacks"] += 1
            return
        if op == BS.BISNP_INV:
            new = "I"
        elif op == BS.BISNP_DATA:
            if st == "I":
                new = "I"
            else:
                new = "S" if r.random() < self.knobs.keep_on_bisnp_data else "I"
        elif op == BS.BISNP_CUR:
            if st == "I":
                new = "I"
            elif st == "E":
                x = r.random()
                keep = self.knobs.keep_on_bisnp_cur
                new = "E" if x < keep / 2 else "S" if x < keep else "I"
            else:
                new = "S" if r.random() < self.knobs.keep_on_bisnp_cur else "I"
        else:   # an opcode we do not know: give up the line
            new = "I"
        if st == "S" and new == "E":
            new = "S"
        self._set_state(ln, new)
        answer = {"I": BR.BIRSP_I, "S": BR.BIRSP_S, "E": BR.BIRSP_E}[new]
        if self.reference is not None and op in _BISNP_KNOWN and \
                not self.reference.m.birsp_allowed(op, answer):
            raise RuntimeError(f"host model bug: {_name(BR, answer)} to {_name(BS, op)}")
        sn.answer, sn.t_answer, sn.state = int(answer), self.now, "answered"
        ln.snoop = None
        self._enqueue("m2s_birsp", _birsp_payload(answer, sn.bi_id, sn.bi_tag), "birsp", sn)

    def _send_conflict(self, ln: _Line, sn: Snoop, req: Txn):
        tag = req.tag if self.knobs.conflict_tag == "req" else self._alloc_tag()
        payload = _rwd_payload(RW.BI_CONFLICT, ST.NO_OP, MF.NO_OP, MV.I, tag, ln.addr,
                               ZERO_LINE, 0)
        txn = Txn(tag=tag, kind="conflict", channel=_RWD, line=ln.addr, payload=payload,
                  t_issue=self.now)
        c = Conflict(tag=tag, line=ln.addr, snoop=sn, req=req, txn=txn)
        if tag in self.conflicts:
            raise RuntimeError(f"BIConflict tag {tag:#06x} already in use")
        self.conflicts[tag] = c
        sn.conflict = c
        sn.state = "conflict"
        self.stats["conflicts"] += 1
        self._enqueue(_RWD, payload, "txn", txn)

    def _on_conflict_ack(self, c: Conflict, h: dict, cycle: int):
        del self.conflicts[c.tag]
        c.txn.ndr, c.txn.t_ndr, c.txn.done = h, cycle, True
        if c.txn.t_sent is None:
            self.violation("ndr_early", f"BI-ConflictAck tag {c.tag:#06x} before the BIConflict "
                           "was transferred", c.line)
        sn, req = c.snoop, c.req
        ln = self.lines[c.line]
        if req.ndr is not None or req.done:
            # late conflict: the Req was served before the BIConflict was processed
            c.late = True
            self.stats["late_conflicts"] += 1
            self._notify("on_conflict", c, cycle)
            if req.done:
                self._answer_snoop(ln, sn) if ln.pending is None else self._process_snoop(sn)
            else:
                sn.state = "wait_req"
            return
        c.late = False
        self.stats["early_conflicts"] += 1
        self._notify("on_conflict", c, cycle)
        if req.drs is not None:
            self.violation("rule6", f"MemData for {req.describe()} arrived before the "
                           f"BI-ConflictAck but its Cmp after it: the Ack passed a queued Cmp",
                           c.line)
        # early conflict: the Req is not served yet and must wait for this snoop's BIRsp
        if sn not in req.blockers:
            req.blockers.append(sn)
        self._answer_snoop(ln, sn)
