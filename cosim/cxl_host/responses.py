"""The response side of :class:`~cosim.cxl_host.core.HostCore`: NDR and DRS handling, checks of every
answer against the coherence reference and the boundary rules, and transaction completion.

A mixin: the state it works on (``lines``, ``txns``, queues, stats) is created by
``HostCore.__init__``."""
from __future__ import annotations

from hw.cxl_encodings import (
    BISnpOpcode as BS, DRSOpcode as DR, NDROpcode as ND,
)
from .protocol import (
    ALL_BE, _CACHING_READS, _fmt, _Line, LINE_BYTES, _name, _NDR_GRANT, ONES, _OWN_NO_DATA,
    Txn, _UNCACHED_WRITES,
)


class HostResponses:
    """The response side of HostCore (a mixin: ``HostCore`` supplies the state)."""

    # ------------------------------------------------------------------ responses
    def on_ndr(self, msg: dict, cycle: int):
        self._on_response("s2m_ndr", self._on_ndr, msg, cycle)

    def on_drs(self, msg: dict, cycle: int):
        self._on_response("s2m_drs", self._on_drs, msg, cycle)

    def _on_response(self, channel, handle, msg: dict, cycle: int):
        """Handle an NDR/DRS, then tell the observers (also when handling raised)."""
        try:
            handle(msg, cycle)
        finally:
            if self.observers:
                tag = msg["hdr"]["tag"]
                self._notify("on_s2m", channel, msg, cycle,
                             self.txns.get(tag) or self._last_done.get(tag))

    def _on_ndr(self, msg: dict, cycle: int):
        if self.trace:
            self.trace(f"{cycle} <- s2m_ndr {_fmt('s2m_ndr', msg)}")
        self.now = max(self.now, cycle)
        self.stats["recv_s2m_ndr"] += 1
        h = msg["hdr"]
        op, tag = h["opcode"], h["tag"]
        if op == ND.BI_CONFLICT_ACK:
            c = self.conflicts.get(tag)
            if c is None:
                self.violation("ndr_tag", f"BI-ConflictAck with tag {tag:#06x} and no BIConflict "
                               "outstanding")
                return
            self._on_conflict_ack(c, h, cycle)
            return
        if op not in _NDR_GRANT:
            self.violation("ndr_opcode", f"NDR opcode {_name(ND, op)} (tag {tag:#06x})")
        txn = self.txns.get(tag)
        if txn is None or txn.kind == "conflict":
            self.violation("ndr_tag", f"{_name(ND, op)} with tag {tag:#06x}, no request "
                           "outstanding with it")
            return
        if txn.ndr is not None:
            self.violation("ndr_dup", f"second NDR {_name(ND, op)} for {txn.describe()}",
                           txn.line)
            return
        if txn.t_sent is None:
            self.violation("ndr_early", f"{_name(ND, op)} for {txn.describe()} before the "
                           "request was transferred", txn.line)
        txn.ndr, txn.t_ndr = h, cycle
        self._check_blockers(txn, cycle, f"NDR {_name(ND, op)}")
        self._check_answer(txn, "ndr", h)
        self._maybe_done(txn)

    def _on_drs(self, msg: dict, cycle: int):
        if self.trace:
            self.trace(f"{cycle} <- s2m_drs {_fmt('s2m_drs', msg)}")
        self.now = max(self.now, cycle)
        self.stats["recv_s2m_drs"] += 1
        h = msg["hdr"]
        op, tag = h["opcode"], h["tag"]
        data = int(msg["data"]).to_bytes(LINE_BYTES, "little")
        txn = self.txns.get(tag)
        if txn is None or txn.kind == "conflict":
            self.violation("drs_tag", f"DRS {_name(DR, op)} with tag {tag:#06x}, no request "
                           "outstanding with it")
            return
        if txn.drs is not None:
            self.violation("drs_dup", f"second DRS for {txn.describe()}", txn.line)
            return
        if not txn.reads_data:
            self.violation("drs_unexpected", f"DRS {_name(DR, op)} for {txn.describe()}, "
                           "which reads no data", txn.line)
            return
        if txn.t_sent is None:
            self.violation("drs_early", f"DRS for {txn.describe()} before the request was "
                           "transferred", txn.line)
        if op == DR.MEM_DATA_NXM:
            if data != ONES or not h["poison"]:
                self.violation("nxm_data", f"MemData-NXM for {txn.describe()} with "
                               f"poison={h['poison']} and data not all ones", txn.line)
        elif op != DR.MEM_DATA:
            self.violation("drs_opcode", f"DRS opcode {_name(DR, op)} for {txn.describe()}",
                           txn.line)
        txn.drs, txn.drs_data, txn.t_drs = h, data, cycle
        self._check_blockers(txn, cycle, f"DRS {_name(DR, op)}")
        self._check_answer(txn, "drs", h)
        self._maybe_done(txn)

    def _check_blockers(self, txn: Txn, cycle: int, what: str):
        for sn in txn.blockers:
            if sn.t_birsp is None or sn.t_birsp >= cycle:
                rule = "rule6" if (sn.conflict is not None and sn.conflict.req is txn) \
                    else "rule5"
                self.violation(rule, f"{what} for {txn.describe()} (sent at cycle {txn.t_sent}) "
                               f"while BISnp {_name(BS, sn.opcode)} bi_tag {sn.bi_tag} (arrived "
                               f"{sn.t_arrive}) was still unanswered (BIRsp "
                               f"{'not sent' if sn.t_birsp is None else f'at {sn.t_birsp}'})",
                               txn.line)

    def _check_answer(self, txn: Txn, which: str, h: dict):
        """Compare one response with the reference answer of ``txn``."""
        e = txn.expect
        if e is None:
            return
        want = getattr(e, which, None)
        got = h["opcode"]
        if want is None:
            self.violation(f"{which}_unexpected", f"{which.upper()} {got} for {txn.describe()}; "
                           "the reference expects none", txn.line)
            return
        allowed = {int(w) for w in want} if isinstance(want, (set, frozenset, tuple, list)) \
            else {int(want)}
        if got not in allowed:
            enum = ND if which == "ndr" else DR
            self.violation(f"{which}_opcode", f"{_name(enum, got)} for {txn.describe()}; "
                           f"reference: {sorted(_name(enum, a) for a in allowed)}", txn.line)

    def _maybe_done(self, txn: Txn):
        """Reads complete with MemData and Cmp (an NXM read with its MemData-NXM alone, unless
        the reference expects an NDR too); everything else with its NDR."""
        if txn.done:
            return
        if txn.reads_data:
            if txn.drs is None:
                return
            if txn.ndr is None:
                nxm = txn.drs["opcode"] == DR.MEM_DATA_NXM
                ndr_expected = (getattr(txn.expect, "ndr", None) is not None
                                if txn.expect is not None else not nxm)
                if ndr_expected:
                    return
        elif txn.ndr is None:
            return
        self._complete(txn)

    def _complete(self, txn: Txn):
        now = self.now
        txn.done, txn.t_done = True, now
        self.txns.pop(txn.tag, None)
        self._last_done[txn.tag] = txn
        if len(self._last_done) > 4096:
            self._last_done.pop(next(iter(self._last_done)))
        self.stats["completed"] += 1
        ln = self.lines.get(txn.line)
        if ln is not None and ln.pending is txn:
            ln.pending = None
            self._apply_completion(ln, txn)
        txn.new_state = self.state(txn.line)
        self._notify("on_txn_done", txn, now)
        for cb in txn.callbacks:
            cb(txn)
        txn.callbacks.clear()
        if ln is not None and ln.snoop is not None and ln.snoop.state in (
                "wait_req", "wait_write", "wait_wb"):
            self._process_snoop(ln.snoop)

    def _apply_completion(self, ln: _Line, txn: Txn):
        kind = txn.kind
        grant = txn.grant
        nxm = txn.drs is not None and txn.drs["opcode"] == DR.MEM_DATA_NXM
        if kind in _CACHING_READS:
            if nxm or grant is None:
                return      # nothing granted (already reported if the reference disagrees)
            poison = bool(txn.drs["poison"])
            if self.checker is not None and txn.drs_data is not None:
                self.checker.read(ln.addr, txn.drs_data, txn.t_sent, txn.t_drs,
                                  who=f"host-{kind}", poison=poison)
            ln.data = txn.drs_data
            ln.poison = poison
            ln.dirty = 0
            self._set_state(ln, grant)
        elif kind == "rd_cur":
            if not nxm and self.checker is not None and txn.drs_data is not None:
                self.checker.read(ln.addr, txn.drs_data, txn.t_sent, txn.t_drs,
                                  who="host-rd_cur", poison=bool(txn.drs["poison"]))
        elif kind in _OWN_NO_DATA:
            if grant == "E":
                # ownership without data: the reason to ask was to overwrite the whole line
                ln.data = None
                ln.dirty = 0
                ln.poison = False
                self._set_state(ln, "E")
                # (part of this transaction, so also while a late-conflict snoop waits for it)
                self.store(ln.addr, self.rng.randbytes(LINE_BYTES), ALL_BE, _internal=True)
            elif grant == "S":
                self.violation("grant", f"Cmp-S for {txn.describe()}", ln.addr)
        elif kind in _UNCACHED_WRITES:
            if txn.wr_handle is not None:
                self.checker.write_end(txn.wr_handle, txn.t_ndr)
        # writebacks, flushes, clean evictions: state changed at issue
