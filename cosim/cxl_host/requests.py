"""The issuing side of :class:`~cosim.cxl_host.core.HostCore`: which requests are legal from a line's
state, directed requests and CPU loads/stores, raw messages, and seeded random traffic.

A mixin: the state it works on (``lines``, ``txns``, queues, stats) is created by
``HostCore.__init__``."""
from __future__ import annotations


from hw.cxl_encodings import (
    MetaField as MF, MetaValue as MV, ReqOpcode as RQ, RwDOpcode as RW, SnpType as ST,
)
from .protocol import (
    ALL_BE, _birsp_payload, CPU_KINDS, DEFAULT_MIX, IllegalHostOp, LINE_BYTES, _merge,
    _READ_OPS, _REQ, REQ_KINDS, _req_payload, _RWD, _rwd_payload, Txn, _UNCACHED_WRITES,
    _WRITEBACKS, ZERO_LINE,
)


class HostRequests:
    """The issuing side of HostCore (a mixin: ``HostCore`` supplies the state)."""

    # ------------------------------------------------------------------ issuing
    def legal_kinds(self, addr: int):
        """Request kinds and CPU actions legal for ``addr`` now (random traffic picks these)."""
        ln = self.lines[addr]
        out = []
        st = ln.state
        if st in "SEM":
            out.append("load")
        if st in "EM" and (ln.snoop is None or ln.snoop.state == "queued"):
            out.append("store")
        if ln.pending is None and ln.snoop is None:
            out.append("spec")
            if st in "SE":
                out.append("silent_drop")
            for k, spec in REQ_KINDS.items():
                if st in spec[5]:
                    out.append(k)
        return out

    def issue(self, kind: str, addr: int, *, data: bytes | None = None, be: int | None = None,
              poison: int = 0, delay: int | None = None) -> Txn:
        """Issue a request of ``kind`` (a :data:`REQ_KINDS` key) to line ``addr``.

        Raises :class:`IllegalHostOp` when the line is busy (a transaction or snoop pending) or
        the kind is not legal from the line's state. ``data``/``be`` for uncached writes (random
        when omitted); writebacks send the cached line (MemWrPtl with the dirty bytes unless
        ``be`` is given). ``delay``: cycles before the message may go out (None: random)."""
        if kind not in REQ_KINDS:
            raise ValueError(f"unknown request kind {kind!r}; known: {sorted(REQ_KINDS)}")
        ln = self.add_line(addr)
        channel, opcode, snp, mf, mv, states, reads, drop_to = REQ_KINDS[kind]
        if ln.pending is not None:
            raise IllegalHostOp(f"line {addr:#x} has a transaction pending "
                                f"({ln.pending.describe()})")
        if ln.snoop is not None:
            raise IllegalHostOp(f"line {addr:#x} has a BISnp being processed")
        if ln.state not in states:
            raise IllegalHostOp(f"{kind} is not legal from state {ln.state} (needs one of "
                                f"{states})")
        tag = self._alloc_tag()
        rdata = None
        if channel == _REQ:
            payload = _req_payload(opcode, snp, mf, mv, tag, addr)
        else:
            if kind in _WRITEBACKS:
                rdata = ln.data
                if be is None:
                    be = ln.dirty if (ln.dirty and self.rng.random() < 0.5) else ALL_BE
                poison = 1 if ln.poison else poison
            else:
                rdata = data if data is not None else self.rng.randbytes(LINE_BYTES)
                if be is None:
                    be = ALL_BE if kind != "uc_write_ptl" else self._random_be()
            if be != ALL_BE and opcode == RW.MEM_WR:
                opcode = RW.MEM_WR_PTL
            payload = _rwd_payload(opcode, snp, mf, mv, tag, addr, rdata, be, poison)
        txn = Txn(tag=tag, kind=kind, channel=channel, line=addr, payload=payload,
                  t_issue=self.now, data=rdata, be=be or 0, old_state=ln.state, reads_data=reads)
        if self.reference is not None:
            txn.expect = self.reference.expect(channel, payload["hdr"])
        self.txns[tag] = txn
        ln.pending = txn
        if drop_to != "keep":
            if kind in _WRITEBACKS:
                # the cached copy stays (E or S) but is clean now; M -> I drops it
                if drop_to == "I":
                    self._set_state(ln, "I")
                else:
                    ln.dirty = 0
                    self._set_state(ln, drop_to)
            else:
                self._set_state(ln, drop_to)
        self._enqueue(channel, payload, "txn", txn, delay)
        self.kind_counts[kind] = self.kind_counts.get(kind, 0) + 1
        self._notify("on_txn_issue", txn, self.now)
        return txn

    def raw(self, channel: str, *, opcode, snp_type=ST.NO_OP, meta_field=MF.NO_OP,
            meta_value=MV.I, line: int, data: bytes = ZERO_LINE, be: int = ALL_BE, poison=0,
            delay: int | None = 0, track=True) -> Txn | None:
        """Send any Req/RwD header (also illegal ones) without touching host state; the answer
        is still checked against the reference. ``track=False`` for messages with no response
        (MemSpecRd)."""
        tag = self._alloc_tag()
        if channel == _REQ:
            payload = _req_payload(opcode, snp_type, meta_field, meta_value, tag, line)
        elif channel == _RWD:
            payload = _rwd_payload(opcode, snp_type, meta_field, meta_value, tag, line, data, be,
                                   poison)
        else:
            raise ValueError(f"raw messages go on m2s_req or m2s_rwd, not {channel!r}")
        if not track:
            self._enqueue(channel, payload, "spec", None, delay)
            return None
        reads = channel == _REQ and int(opcode) in _READ_OPS
        txn = Txn(tag=tag, kind="raw", channel=channel, line=line, payload=payload,
                  t_issue=self.now, data=data if channel == _RWD else None, be=be,
                  reads_data=reads)
        if self.reference is not None:
            txn.expect = self.reference.expect(channel, payload["hdr"])
        self.txns[tag] = txn
        self._enqueue(channel, payload, "txn", txn, delay)
        self._notify("on_txn_issue", txn, self.now)
        return txn

    def raw_birsp(self, opcode, bi_tag: int, bi_id: int = 0, delay: int | None = 0):
        """A BIRsp the host would not send (unknown tag, wrong kind): for error-path tests."""
        self._enqueue("m2s_birsp", _birsp_payload(opcode, bi_id, bi_tag), "raw_birsp", None, delay)

    def spec_read(self, addr: int, delay=None):
        """MemSpecRd: a hint with no response and no state change."""
        tag = self.rng.randrange(1 << 16)
        payload = _req_payload(RQ.MEM_SPEC_RD, ST.NO_OP, MF.NO_OP, MV.I, tag, addr)
        self.stats["spec"] += 1
        self._enqueue(_REQ, payload, "spec", None, delay)

    @staticmethod
    def _reports(txn: Txn) -> bool:
        """An uncached write is a new value unless the reference says the DCOH drops it."""
        e = txn.expect
        return e is None or getattr(e, "media_write", True)

    # ------------------------------------------------------------------ CPU actions
    def load(self, addr: int) -> bytes:
        ln = self.lines[addr]
        if ln.state == "I":
            raise IllegalHostOp(f"load from line {addr:#x} in state I")
        self.stats["loads"] += 1
        if self.checker is not None:
            self.checker.read(addr, ln.data, self.now, self.now, who="host-load",
                              poison=ln.poison)
        return ln.data

    def store(self, addr: int, data: bytes, be: int = ALL_BE, _internal=False):
        ln = self.lines[addr]
        if ln.state not in "EM":
            raise IllegalHostOp(f"store to line {addr:#x} in state {ln.state}")
        if ln.snoop is not None and ln.snoop.state != "queued" and not _internal:
            raise IllegalHostOp(f"store to line {addr:#x} while a BISnp is being answered")
        if ln.data is None:
            if be != ALL_BE:
                raise IllegalHostOp(f"partial store to line {addr:#x} held without data")
            ln.data = bytes(data)
        else:
            ln.data = _merge(ln.data, data, be)
        if be == ALL_BE:
            ln.poison = False
        ln.dirty |= be
        self.stats["stores"] += 1
        self._set_state(ln, "M")
        if self.checker is not None:
            self.checker.write(addr, bytes(data), be, self.now, self.now, who="host-store")

    def silent_drop(self, addr: int):
        ln = self.lines[addr]
        if ln.state not in "SE" or ln.pending is not None or ln.snoop is not None:
            raise IllegalHostOp(f"silent drop of line {addr:#x} in state {ln.state}")
        self.stats["silent_drops"] += 1
        self._set_state(ln, "I")

    def _random_be(self) -> int:
        r = self.rng.random()
        if r < 0.2:
            lo = self.rng.randrange(LINE_BYTES)
            hi = self.rng.randrange(lo, LINE_BYTES)
            return ((1 << (hi + 1)) - 1) & ~((1 << lo) - 1)
        be = self.rng.getrandbits(LINE_BYTES)
        return be or 1

    def _random_store(self, addr: int):
        if self.rng.random() < self.knobs.partial_store_p and self.lines[addr].data is not None:
            be = self._random_be()
        else:
            be = ALL_BE
        self.store(addr, self.rng.randbytes(LINE_BYTES), be)

    # ------------------------------------------------------------------ random traffic
    def start_random(self, n_messages: int, hot_lines, mix: dict | None = None):
        """Issue random legal actions on ``hot_lines`` until ``n_messages`` more host messages
        have been queued (snoop answers come on top)."""
        mix = dict(DEFAULT_MIX if mix is None else mix)
        unknown = set(mix) - set(REQ_KINDS) - set(CPU_KINDS)
        if unknown:
            raise ValueError(f"unknown mix entries {sorted(unknown)}")
        self._rand_lines = list(hot_lines)
        for a in self._rand_lines:
            self.add_line(a)
        self._rand_mix = [(k, w) for k, w in mix.items() if w > 0]
        self._choice_cache = {}
        self._rand_left = n_messages
        self._rand_target = self.enqueued + n_messages

    def stop_random(self):
        self._rand_left = 0

    def _random_action(self):
        if self.enqueued >= self._rand_target:
            self._rand_left = 0
            return
        self._rand_left = self._rand_target - self.enqueued
        addr = self.rng.choice(self._rand_lines)
        ln = self.lines[addr]
        st = ln.state
        idle = ln.pending is None and ln.snoop is None
        full = len(self.txns) >= self.knobs.max_outstanding
        # weighted choice among the legal actions (precomputed per situation)
        key = (st, idle, full, ln.snoop is None or ln.snoop.state == "queued")
        table = self._choice_cache.get(key)
        if table is None:
            legal = set(self.legal_kinds(addr))
            if full:
                legal &= {"load", "store", "silent_drop"}
            choices = [(k, w) for k, w in self._rand_mix if k in legal]
            table = self._choice_cache[key] = (choices, sum(w for _, w in choices))
        choices, total = table
        if not choices:
            return
        x = self.rng.random() * total
        for kind, w in choices:
            x -= w
            if x < 0:
                break
        if kind == "load":
            self.load(addr)
        elif kind == "store":
            self._random_store(addr)
        elif kind == "silent_drop":
            self.silent_drop(addr)
        elif kind == "spec":
            self.spec_read(addr)
        else:
            poison = 1 if (kind in _UNCACHED_WRITES and self.knobs.poison_p and
                           self.rng.random() < self.knobs.poison_p) else 0
            self.issue(kind, addr, poison=poison)
