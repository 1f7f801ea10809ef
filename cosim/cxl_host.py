"""Host model for the CXL.mem (HDM-DB) channels of the DCOH: a caching host with real MESI state.

Two layers:

* :class:`HostCore` is pure Python (no cocotb): per-line MESI state and data for any number of
  lines, the host half of the CXL 3.1 protocol (legal requests from each "buried" state, BISnp
  answers, BIConflict handshakes), adversarial per-channel delays, seeded random traffic, and
  checks of every response against the coherence reference (``sw_model.coherence``) and the
  boundary-observable rules 5, 6, 7 of architecture 5.3. Time is a cycle number the caller
  supplies; messages go out through per-channel queues (:attr:`HostCore.out`) and come in
  through :meth:`HostCore.on_ndr` / :meth:`on_drs` / :meth:`on_bisnp`. Unit tests drive it
  against a fake device (tests/model/test_cxl_host.py).
* :class:`CxlHost` is the cocotb adapter: it drives the six channel ports of a DUT (``m2s_req``,
  ``m2s_rwd``, ``m2s_birsp`` in; ``s2m_ndr``, ``s2m_drs``, ``s2m_bisnp`` out; payloads packed
  with ``cosim.streams.PayloadCodec`` and ``hw.cxl.messages.message_layout``) and offers
  awaitable directed operations and ``run_random``.

Protocol choices (docs/coherence.md is the contract; these are the host-side details):

* One outstanding host transaction (Req or MemWr/MemWrPtl) per line; tags are 16 bit, unique
  among outstanding transactions, allocated round robin so a stale response is caught as an
  unknown tag for a long time.
* BIConflict is its own M2S RwD transaction: it carries the conflicting line's address and a
  *fresh* tag from the same pool (CXL gives every M2S transaction its own tag, which the
  subordinate reflects in its response; the DCOH answers BI-ConflictAck with the BIConflict's
  tag). ``HostKnobs.conflict_tag = "req"`` instead reuses the pending Req's tag (the Ack is then
  told apart from the Req's Cmp by opcode), so both readings of the spec can be exercised.
* A BISnp that meets a pending Req to its line (issued, even if not yet transferred) gets a
  BIConflict. If the Req's Cmp arrives before the BI-ConflictAck (late conflict), the host waits
  for the Req to complete (Cmp and, for reads, MemData) and answers the snoop from its new state;
  if the Ack comes first (early conflict), it answers from its old state at once and the Req is
  served later. A BISnp that meets a pending write waits for the write's Cmp (no BIConflict:
  RwD is never blocked), then is answered from the state after the write.
* A dirty line is written back with MemWr (MemWrPtl when only some bytes are dirty) before the
  BIRsp, and the BIRsp is sent only after that write's Cmp.
* Host writes to media carry cached values and are not reported to the value checker; CPU
  stores are (as writes at one cycle), and so are uncached writes from I (over [sent, Cmp]).
"""
from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from hw.cxl_encodings import (
    BIRspOpcode as BR, BISnpOpcode as BS, DRSOpcode as DR, MetaField as MF, MetaValue as MV,
    NDROpcode as ND, ReqOpcode as RQ, RwDOpcode as RW, SnpType as ST,
)

__all__ = ["HostCore", "HostKnobs", "Txn", "Snoop", "Conflict", "Violation", "IllegalHostOp",
           "HostViolationError", "REQ_KINDS", "CPU_KINDS", "DEFAULT_MIX", "CxlHost"]

LINE_BYTES = 64
ALL_BE = (1 << LINE_BYTES) - 1
ONES = b"\xff" * LINE_BYTES
ZERO_LINE = bytes(LINE_BYTES)
OUT_CHANNELS = ("m2s_req", "m2s_rwd", "m2s_birsp")
IN_CHANNELS = ("s2m_ndr", "s2m_drs", "s2m_bisnp")


class IllegalHostOp(ValueError):
    """A directed operation the host may not issue from the line's current state."""


class HostViolationError(AssertionError):
    """A protocol or coherence violation by the device (raised at once in strict mode)."""


@dataclass(frozen=True, slots=True)
class Violation:
    cycle: int
    rule: str
    line: int | None
    message: str

    def __str__(self):
        where = f" line {self.line:#x}" if self.line is not None else ""
        return f"[cycle {self.cycle}] {self.rule}{where}: {self.message}"


# --------------------------------------------------------------------------------- request kinds
# kind -> (channel, opcode, snp_type, meta_field, meta_value, states it may be issued from,
#          reads data, state the host drops to when it issues it)
# "keep" in the last column: unchanged at issue.
_REQ = "m2s_req"
_RWD = "m2s_rwd"
REQ_KINDS = {
    # reads that cache
    "rd_shared":   (_REQ, RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, "I", True, "keep"),
    "rd_own":      (_REQ, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, "IS", True, "keep"),
    "rd_data":     (_REQ, RQ.MEM_RD_DATA, ST.SNP_DATA, MF.META0_STATE, MV.A, "I", True, "keep"),
    # current value, not cached
    "rd_cur":      (_REQ, RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, "IS", True, "keep"),
    # ownership without data (then a full-line store), or flush
    "inv_own":     (_REQ, RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A, "IS", False, "keep"),
    "invnt_own":   (_REQ, RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.A, "IS", False, "keep"),
    "inv_flush":   (_REQ, RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.I, "IS", False, "I"),
    "invnt_flush": (_REQ, RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.I, "IS", False, "I"),
    # dropping a clean line with notice
    "cln_evct":    (_REQ, RQ.MEM_CLN_EVCT, ST.NO_OP, MF.META0_STATE, MV.I, "SE", False, "I"),
    # writebacks of a dirty line (MemWrPtl when only part of it is dirty)
    "wb_drop":     (_RWD, RW.MEM_WR, ST.NO_OP, MF.META0_STATE, MV.I, "M", False, "I"),
    "wb_keep_e":   (_RWD, RW.MEM_WR, ST.NO_OP, MF.META0_STATE, MV.A, "M", False, "E"),
    "wb_keep_s":   (_RWD, RW.MEM_WR, ST.NO_OP, MF.META0_STATE, MV.S, "M", False, "S"),
    "wb_noop":     (_RWD, RW.MEM_WR, ST.NO_OP, MF.NO_OP, MV.I, "M", False, "E"),
    # uncached writes of new data from I
    "uc_write":    (_RWD, RW.MEM_WR, ST.NO_OP, MF.META0_STATE, MV.I, "I", False, "keep"),
    "uc_write_ptl": (_RWD, RW.MEM_WR_PTL, ST.NO_OP, MF.META0_STATE, MV.I, "I", False, "keep"),
    "uc_write_noop": (_RWD, RW.MEM_WR, ST.NO_OP, MF.NO_OP, MV.I, "I", False, "keep"),
}
_CACHING_READS = ("rd_shared", "rd_own", "rd_data")
_OWN_NO_DATA = ("inv_own", "invnt_own")
_WRITEBACKS = ("wb_drop", "wb_keep_e", "wb_keep_s", "wb_noop")
_UNCACHED_WRITES = ("uc_write", "uc_write_ptl", "uc_write_noop")
# host-side actions without a message (or without a completion)
CPU_KINDS = ("load", "store", "silent_drop", "spec")

DEFAULT_MIX = {
    "rd_shared": 8, "rd_own": 8, "rd_data": 3, "rd_cur": 3, "inv_own": 2, "invnt_own": 1,
    "inv_flush": 1, "invnt_flush": 1, "cln_evct": 3, "wb_drop": 4, "wb_keep_e": 2,
    "wb_keep_s": 2, "wb_noop": 1, "uc_write": 2, "uc_write_ptl": 2, "uc_write_noop": 1,
    "load": 10, "store": 10, "silent_drop": 2, "spec": 1,
}

_READ_OPS = (int(RQ.MEM_RD), int(RQ.MEM_RD_DATA))
_BISNP_KNOWN = (int(BS.BISNP_CUR), int(BS.BISNP_DATA), int(BS.BISNP_INV))
_NDR_GRANT = {int(ND.CMP): None, int(ND.CMP_S): "S", int(ND.CMP_E): "E"}


def _req_payload(opcode, snp, mf, mv, tag, line):
    return {"hdr": {"opcode": int(opcode), "snp_type": int(snp), "meta_field": int(mf),
                    "meta_value": int(mv), "tag": tag, "addr": line, "ld_id": 0, "ckid": 0,
                    "rsvd": 0, "tc": 0}}


def _rwd_payload(opcode, snp, mf, mv, tag, line, data: bytes, be: int, poison=0):
    return {"hdr": {"opcode": int(opcode), "snp_type": int(snp), "meta_field": int(mf),
                    "meta_value": int(mv), "tag": tag, "addr": line, "poison": poison, "trp": 0,
                    "ld_id": 0, "ckid": 0, "rsvd": 0, "tc": 0},
            "data": int.from_bytes(data, "little"), "be": be}


def _birsp_payload(opcode, bi_id, bi_tag):
    return {"hdr": {"opcode": int(opcode), "bi_id": bi_id, "bi_tag": bi_tag, "low_addr": 0,
                    "rsvd": 0}}


def _name(enum_cls, value):
    try:
        return enum_cls(value).name
    except ValueError:
        return f"{enum_cls.__name__}({value})"


_OPS = {"m2s_req": RQ, "m2s_rwd": RW, "m2s_birsp": BR, "s2m_ndr": ND, "s2m_drs": DR,
        "s2m_bisnp": BS}


def _fmt(channel, msg) -> str:
    """One message on one line, for traces."""
    h = msg["hdr"]
    parts = [_name(_OPS[channel], h["opcode"])]
    for k in ("snp_type", "meta_field", "meta_value"):
        if k in h:
            parts.append(f"{k[:4]}={h[k]}")
    for k in ("tag", "bi_tag", "addr", "poison"):
        if k in h:
            parts.append(f"{k}={h[k]:#x}")
    if "be" in msg and msg["be"] != ALL_BE:
        parts.append(f"be={msg['be']:#x}")
    if "data" in msg:
        parts.append(f"data={int(msg['data']).to_bytes(LINE_BYTES, 'little')[:8].hex()}..")
    return " ".join(parts)


def _mask_bytes(be: int):
    return [i for i in range(LINE_BYTES) if (be >> i) & 1]


def _merge(old: bytes, new: bytes, be: int) -> bytes:
    if be == ALL_BE:
        return bytes(new)
    out = bytearray(old)
    for i in _mask_bytes(be):
        out[i] = new[i]
    return bytes(out)


# ------------------------------------------------------------------------------ records
@dataclass(eq=False)
class Txn:
    """One host M2S transaction with a completion (Req, MemWr/MemWrPtl or BIConflict)."""
    tag: int
    kind: str                 # a REQ_KINDS key, "conflict" or "raw"
    channel: str
    line: int
    payload: dict
    t_issue: int
    expect: object = None     # reference answer (sw_model.coherence), None for BIConflict
    data: bytes | None = None     # RwD data
    be: int = 0
    old_state: str = "I"
    t_sent: int | None = None
    ndr: dict | None = None
    t_ndr: int | None = None
    drs: dict | None = None
    drs_data: bytes | None = None
    t_drs: int | None = None
    done: bool = False
    t_done: int | None = None
    new_state: str | None = None
    snoop: "Snoop | None" = None       # the snoop this writeback answers
    blockers: list = field(default_factory=list)   # snoops that must be answered first (rule 5/6)
    callbacks: list = field(default_factory=list)
    reads_data: bool = False
    wr_handle: int | None = None      # LineValueChecker.write_begin handle of an uncached write

    @property
    def opcode(self) -> int:
        return self.payload["hdr"]["opcode"]

    @property
    def grant(self):
        return None if self.ndr is None else _NDR_GRANT.get(self.ndr["opcode"], None)

    def describe(self) -> str:
        h = self.payload["hdr"]
        ops = RQ if self.channel == _REQ else RW
        return (f"{self.kind} {_name(ops, h['opcode'])} snp={_name(ST, h['snp_type'])} "
                f"meta={_name(MF, h['meta_field'])}/{_name(MV, h['meta_value'])} "
                f"tag={self.tag:#06x} line={self.line:#x}")


@dataclass(eq=False)
class Snoop:
    """A BISnp received by the host."""
    bi_tag: int
    bi_id: int
    opcode: int
    line: int
    t_arrive: int
    state: str = "queued"   # queued, conflict, wait_req, wait_write, wait_wb, answered
    conflict: "Conflict | None" = None
    answer: int | None = None
    t_answer: int | None = None      # BIRsp enqueued
    t_birsp: int | None = None       # BIRsp transferred
    wb: Txn | None = None


@dataclass(eq=False)
class Conflict:
    tag: int
    line: int
    snoop: Snoop
    req: Txn
    txn: Txn
    late: bool | None = None


@dataclass(eq=False)
class OutMsg:
    channel: str
    payload: dict
    due: int
    what: str                 # "txn", "birsp", "spec"
    obj: object = None


class _Line:
    __slots__ = ("addr", "state", "data", "dirty", "poison", "pending", "snoop", "open_snoops",
                 "n_acquired")

    def __init__(self, addr):
        self.addr = addr
        self.state = "I"
        self.data = None
        self.dirty = 0
        self.poison = False
        self.pending: Txn | None = None
        self.snoop: Snoop | None = None
        self.open_snoops: list[Snoop] = []     # BISnps whose BIRsp has not been transferred
        self.n_acquired = 0


@dataclass
class HostKnobs:
    """Adversarial timing and behaviour of the host (all seeded)."""
    # per outbound channel: probability that a message is held back, and for how many cycles
    # at most (uniform 1..max); order within a channel is always kept
    delay_p: dict = field(default_factory=lambda: {c: 0.25 for c in OUT_CHANNELS})
    delay_max: dict = field(default_factory=lambda: {c: 12 for c in OUT_CHANNELS})
    snoop_delay_max: int = 6        # cycles between a BISnp's arrival and its processing
    snoop_delay_min: int = 0
    issue_p: float = 0.6            # random traffic: probability per cycle of one action
    max_outstanding: int = 48       # host transactions in flight (all lines)
    conflict_tag: str = "fresh"     # "fresh" or "req" (see module docstring)
    keep_on_bisnp_data: float = 0.5   # BISnpData: keep S (vs drop) when allowed
    keep_on_bisnp_cur: float = 0.6    # BISnpCur: keep the line (vs drop)
    partial_store_p: float = 0.6      # a store writes a random subset of bytes
    poison_p: float = 0.0             # uncached writes with poison (random traffic)

    def __post_init__(self):
        if self.conflict_tag not in ("fresh", "req"):
            raise ValueError(f"conflict_tag must be 'fresh' or 'req', got {self.conflict_tag!r}")
        for c in OUT_CHANNELS:
            self.delay_p.setdefault(c, 0.0)
            self.delay_max.setdefault(c, 0)

    @classmethod
    def calm(cls) -> "HostKnobs":
        """No added delays: for directed tests that want exact orders."""
        return cls(delay_p={c: 0.0 for c in OUT_CHANNELS}, delay_max={c: 0 for c in OUT_CHANNELS},
                   snoop_delay_max=0)


# --------------------------------------------------------------------------- reference adapter
class Reference:
    """The coherence reference as the host uses it: expected answers for a header, and the
    value checker. Wraps ``sw_model.coherence`` (imported lazily, so this module loads before it
    exists); ``reference=None`` in :class:`HostCore` disables answer checks."""

    def __init__(self, cfg, module=None):
        if module is None:
            import sw_model.coherence as module
        self.cfg = cfg
        self.m = module

    def expect(self, channel: str, hdr: dict):
        if channel == _REQ:
            return self.m.expected_req(self.cfg, hdr)
        return self.m.expected_rwd(self.cfg, hdr)


# ------------------------------------------------------------------------------------ the core
class HostCore:
    """The host: MESI state per line, CXL.mem host protocol, checks. See the module docstring.

    ``checker``: an object with ``write(line, data, be, t_start, t_end)`` and
    ``read(line, data, t_start, t_end, who=..., poison=...)`` (``sw_model.coherence
    .LineValueChecker``), or None. ``reference``: a :class:`Reference` (or any object with
    ``expect(channel, hdr)``), or None. ``strict``: raise :class:`HostViolationError` at the
    first violation instead of only recording it in :attr:`violations`.
    ``observers``: objects notified of host events (``cosim.coherence_check``): any of
    ``on_state(line, old, new, cycle)``, ``on_txn_issue(txn, cycle)``,
    ``on_txn_done(txn, cycle)``.
    """

    def __init__(self, cfg, *, seed: int, lines=(), knobs: HostKnobs | None = None,
                 reference=None, checker=None, strict=False, observers=(), log=None,
                 bi_tags=None, trace=None):
        self.cfg = cfg
        self.seed = seed
        self.rng = random.Random(seed)
        self.knobs = knobs or HostKnobs()
        self.reference = reference
        self.checker = checker
        self.strict = strict
        self.observers = list(observers)
        self.log = log
        self.trace = trace          # callable(str) for a message-by-message trace, or None
        self.bi_tags = bi_tags if bi_tags is not None else getattr(cfg, "bi_tags", None)
        self.now = 0
        self.lines: dict[int, _Line] = {}
        for a in lines:
            self.add_line(a)
        self.out: dict[str, deque[OutMsg]] = {c: deque() for c in OUT_CHANNELS}
        self.txns: dict[int, Txn] = {}          # outstanding, by tag
        self.conflicts: dict[int, Conflict] = {}   # by BIConflict tag
        self.open_bitags: dict[int, Snoop] = {}    # BISnps whose BIRsp is not transferred
        self.violations: list[Violation] = []
        self._last_done: dict[int, Txn] = {}     # recently completed, by tag (for observers)
        self._next_tag = self.rng.randrange(1 << 16)
        self._timers = []
        self._timer_seq = 0
        self._last_due = {c: 0 for c in OUT_CHANNELS}
        # random traffic
        self._rand_left = 0
        self._rand_lines: list[int] = []
        self._rand_mix: list[tuple[str, int]] = []
        # statistics
        self.stats = {k: 0 for k in (
            "sent_m2s_req", "sent_m2s_rwd", "sent_m2s_birsp", "recv_s2m_ndr", "recv_s2m_drs",
            "recv_s2m_bisnp", "loads", "stores", "silent_drops", "spec", "conflicts",
            "late_conflicts", "early_conflicts", "snoop_writebacks", "completed",
            "max_open_bisnp")}
        self.kind_counts: dict[str, int] = {}
        self.enqueued = 0

    # ------------------------------------------------------------------ bookkeeping
    def add_line(self, addr: int):
        if addr not in self.lines:
            self.lines[addr] = _Line(addr)
        return self.lines[addr]

    def state(self, addr: int) -> str:
        ln = self.lines.get(addr)
        return "I" if ln is None else ln.state

    def cached(self, addr: int):
        """(state, data, poison) of a line in the host cache."""
        ln = self.lines[addr]
        return ln.state, ln.data, ln.poison

    @property
    def messages_sent(self) -> int:
        return self.stats["sent_m2s_req"] + self.stats["sent_m2s_rwd"] + \
            self.stats["sent_m2s_birsp"]

    def outstanding(self) -> int:
        return len(self.txns)

    def idle(self) -> bool:
        """Nothing queued, outstanding, or waiting; random traffic finished."""
        return (not self.txns and not self.conflicts and self._rand_left <= 0 and
                not any(self.out.values()) and not self._timers and
                not any(ln.snoop for ln in self.lines.values()))

    def busy_lines(self):
        return [a for a, ln in self.lines.items() if ln.pending or ln.snoop]

    def violation(self, rule: str, message: str, line=None):
        v = Violation(self.now, rule, line, message)
        self.violations.append(v)
        if self.log:
            self.log(f"VIOLATION {v}")
        if self.strict:
            raise HostViolationError(str(v))

    def _notify(self, what, *args):
        for o in self.observers:
            fn = getattr(o, what, None)
            if fn is not None:
                fn(*args)

    def _set_state(self, ln: _Line, new: str):
        old = ln.state
        if old == new:
            return
        ln.state = new
        if new == "I":
            ln.data, ln.dirty, ln.poison = None, 0, False
        elif old == "I":
            ln.n_acquired += 1
        self._notify("on_state", ln.addr, old, new, self.now)

    def _alloc_tag(self) -> int:
        for _ in range(1 << 16):
            t = self._next_tag
            self._next_tag = (t + 1) & 0xFFFF
            if t not in self.txns and t not in self.conflicts:
                return t
        raise RuntimeError("all 65536 tags outstanding")

    def _after(self, delay: int, fn, *args):
        self._timer_seq += 1
        heapq.heappush(self._timers, (self.now + delay, self._timer_seq, fn, args))

    def _enqueue(self, channel, payload, what, obj=None, delay=None):
        if delay is None:
            k = self.knobs
            p, mx = k.delay_p.get(channel, 0.0), k.delay_max.get(channel, 0)
            delay = self.rng.randint(1, mx) if mx and self.rng.random() < p else 0
        due = max(self.now + delay, self._last_due[channel])
        self._last_due[channel] = due
        m = OutMsg(channel, payload, due, what, obj)
        self.out[channel].append(m)
        self.enqueued += 1
        return m

    # ------------------------------------------------------------------ time
    def tick(self, cycle: int):
        """Advance to ``cycle``: run due timers (snoop processing) and random traffic."""
        self.now = cycle
        timers = self._timers
        while timers and timers[0][0] <= cycle:
            _, _, fn, args = heapq.heappop(timers)
            fn(*args)
        if self._rand_left > 0 and self.rng.random() < self.knobs.issue_p:
            self._random_action()

    def pop_due(self, channel: str, cycle: int):
        """The next message of ``channel`` if it is due at ``cycle`` (removed from the queue)."""
        q = self.out[channel]
        if q and q[0].due <= cycle:
            return q.popleft()
        return None

    def on_sent(self, m: OutMsg, cycle: int):
        """The transport reports that ``m`` was transferred (valid & ready) at ``cycle``."""
        self.now = max(self.now, cycle)
        self.stats["sent_" + m.channel] += 1
        if self.trace:
            self.trace(f"{cycle} -> {m.channel} {_fmt(m.channel, m.payload)}")
        if self.observers:
            self._notify("on_m2s", m.channel, m.payload, cycle, m.obj)
        if m.what == "txn":
            txn = m.obj
            txn.t_sent = cycle
            if txn.kind in _UNCACHED_WRITES and self.checker is not None and self._reports(txn):
                txn.wr_handle = self.checker.write_begin(txn.line, txn.data, txn.be, cycle,
                                                         who=f"host-{txn.kind}",
                                                         poison=bool(txn.payload["hdr"]["poison"]))
            if txn.channel == _REQ:
                ln = self.lines.get(txn.line)
                if ln is not None:
                    # rule 5: a Req that reaches the DCOH while a BISnp to its line is
                    # outstanding must not be served before that BISnp's BIRsp
                    txn.blockers.extend(s for s in ln.open_snoops
                                        if s.t_arrive <= cycle and s not in txn.blockers)
        elif m.what == "birsp":
            sn = m.obj
            sn.t_birsp = cycle
            if self.open_bitags.get(sn.bi_tag) is sn:
                del self.open_bitags[sn.bi_tag]
            ln = self.lines.get(sn.line)
            if ln is not None and sn in ln.open_snoops:
                ln.open_snoops.remove(sn)

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
            if req.done:
                self._answer_snoop(ln, sn) if ln.pending is None else self._process_snoop(sn)
            else:
                sn.state = "wait_req"
            return
        c.late = False
        self.stats["early_conflicts"] += 1
        if req.drs is not None:
            self.violation("rule6", f"MemData for {req.describe()} arrived before the "
                           f"BI-ConflictAck but its Cmp after it: the Ack passed a queued Cmp",
                           c.line)
        # early conflict: the Req is not served yet and must wait for this snoop's BIRsp
        if sn not in req.blockers:
            req.blockers.append(sn)
        self._answer_snoop(ln, sn)

    # ------------------------------------------------------------------ reports
    def summary(self) -> dict:
        states = {s: 0 for s in "ISEM"}
        for ln in self.lines.values():
            states[ln.state] += 1
        return {"seed": self.seed, "cycle": self.now, "messages_sent": self.messages_sent,
                "violations": len(self.violations), "outstanding": len(self.txns),
                "states": states, **self.stats, "kinds": dict(sorted(self.kind_counts.items()))}


# =============================================================================== cocotb adapter
def _fast_getter(handle):
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    return raw if raw is not None else (lambda: str(handle.value))


def bursty_pauses(rng: random.Random, p: float, mean_len: float = 3.0):
    """Pause pattern: each cycle a pause starts with probability ``p``; a pause lasts a
    geometric number of cycles with mean ``mean_len`` (so gaps come in bursts and channels drift
    apart in time)."""
    stay = 1.0 - 1.0 / max(mean_len, 1.0)
    paused = False
    while True:
        if paused:
            paused = rng.random() < stay
        else:
            paused = rng.random() < p
        yield paused


class ChannelSet:
    """All valid/ready streams of one agent, driven by one coroutine (one wake-up per cycle).

    Outbound channels take items from a ``pop(cycle) -> (payload, token) | None`` callable and
    report transfers to ``on_sent(token, cycle)``; inbound channels call ``on_recv(payload,
    cycle)`` on the edge of each transfer. Payloads are dicts packed with the hardware layout
    (``cosim.streams.PayloadCodec``). Each channel has its own seeded pause pattern (valid gaps
    out, ready gaps in). :attr:`cycle` counts rising edges of ``clock`` since :meth:`start`
    (the first edge is cycle 1); :meth:`cycle_of` converts a simulation time (steps) to that
    count, for agents that see edges in their own coroutines (the PMEM model's hooks).

    One coroutine instead of one per channel (``cosim.streams`` engines) because the host's
    checks need the exact cycle of every transfer on every channel, and because waking once per
    cycle for all channels is several times cheaper in Python.
    """

    def __init__(self, dut, clock, reset=None):
        self.dut = dut
        self.clock = clock
        self.reset = reset
        self.outs = []
        self.ins = []
        self.cycle = 0
        self.every_cycle = []       # callables(cycle) run once per cycle before driving
        self.hold_until = {}        # channel name -> cycle until which it is forced paused
        self._task = None
        self._t0 = None
        self._period = None

    def cycle_of(self, t: int) -> int:
        """Cycle number of the rising edge at simulation time ``t`` (steps)."""
        return 1 + (t - self._t0) // self._period

    def add_out(self, name, layout, pop, on_sent, pauses=None, idle_payload=None):
        """``idle_payload``: payload driven while valid is low (default: the last one stays;
        a stream's payload is meaningless without valid, and a DUT must not look at it)."""
        from cosim.streams import PayloadCodec
        codec = layout if isinstance(layout, PayloadCodec) else PayloadCodec(layout)
        payload = getattr(self.dut, f"{name}__payload")
        if len(payload) != codec.width:
            raise ValueError(f"{name}__payload is {len(payload)} bits, layout is {codec.width}")
        valid = getattr(self.dut, f"{name}__valid")
        ready = getattr(self.dut, f"{name}__ready")
        valid.value = 0
        self.outs.append({"name": name, "codec": codec, "payload": payload, "valid": valid,
                          "ready": _fast_getter(ready), "pop": pop, "on_sent": on_sent,
                          "pauses": pauses, "cur": None, "driven": None, "count": 0,
                          "idle": None if idle_payload is None else codec.pack(idle_payload)})

    def add_in(self, name, layout, on_recv, pauses=None):
        from cosim.streams import PayloadCodec
        codec = layout if isinstance(layout, PayloadCodec) else PayloadCodec(layout)
        payload = getattr(self.dut, f"{name}__payload")
        if len(payload) != codec.width:
            raise ValueError(f"{name}__payload is {len(payload)} bits, layout is {codec.width}")
        valid = getattr(self.dut, f"{name}__valid")
        ready = getattr(self.dut, f"{name}__ready")
        ready.value = 0
        self.ins.append({"name": name, "codec": codec, "payload": _fast_getter(payload),
                         "valid": _fast_getter(valid), "ready": ready, "on_recv": on_recv,
                         "pauses": pauses, "ready_out": False, "count": 0})

    def hold(self, name: str, cycles: int):
        """Force channel ``name`` paused (no valid / no ready) for the next ``cycles`` cycles."""
        self.hold_until[name] = self.cycle + cycles

    def start(self):
        import cocotb
        if self._task is None:
            self._task = cocotb.start_soon(self._run())

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self):
        from cocotb.triggers import RisingEdge
        edge = RisingEdge(self.clock)
        rst = _fast_getter(self.reset) if self.reset is not None else (lambda: "0")
        outs, ins, every, hold = self.outs, self.ins, self.every_cycle, self.hold_until
        from cocotb import simulator

        def now():
            hi, lo = simulator.get_sim_time()
            return hi << 32 | lo
        while True:
            await edge
            self.cycle += 1
            cyc = self.cycle
            if cyc <= 2:
                if cyc == 1:
                    self._t0 = now()
                else:
                    self._period = now() - self._t0
            if rst() == "1":
                for o in outs:
                    if o["cur"] is not None:
                        o["valid"].value = 0
                        o["cur"] = None
                continue
            # sample handshakes of the edge that just happened
            for o in outs:
                if o["cur"] is not None and o["ready"]() == "1":
                    o["count"] += 1
                    o["on_sent"](o["cur"], cyc)
                    o["cur"] = None
            for i in ins:
                if i["ready_out"] and i["valid"]() == "1":
                    i["count"] += 1
                    i["on_recv"](i["codec"].unpack(int(i["payload"](), 2)), cyc)
            for fn in every:
                fn(cyc)
            # drive for the next edge
            for o in outs:
                if o["cur"] is not None:
                    continue            # held until taken (stream rule: stable while valid)
                paused = o["pauses"] is not None and next(o["pauses"])
                if hold and hold.get(o["name"], 0) >= cyc:
                    paused = True
                item = None if paused else o["pop"](cyc)
                if item is None:
                    if o["driven"]:
                        o["valid"].value = 0
                        o["driven"] = False
                        if o["idle"] is not None:
                            o["payload"].value = o["idle"]
                    continue
                payload, token = item
                o["payload"].value = o["codec"].pack(payload)
                o["cur"] = token
                if not o["driven"]:
                    o["valid"].value = 1
                    o["driven"] = True
            for i in ins:
                want = not (i["pauses"] is not None and next(i["pauses"]))
                if hold and hold.get(i["name"], 0) >= cyc:
                    want = False
                if want != i["ready_out"]:
                    i["ready"].value = int(want)
                    i["ready_out"] = want


class CxlHost:
    """cocotb adapter: :class:`HostCore` on the six CXL.mem channel ports of ``dut``.

    ``stall``: per-channel pause probability (valid gaps on m2s_*, ready gaps on s2m_*), one
    float for all or a dict by channel name; pauses are bursty (:func:`bursty_pauses`).
    Directed operations are coroutines returning the finished :class:`Txn` (its ``ndr``,
    ``drs``, ``drs_data``, ``grant`` and cycle stamps)::

        host = CxlHost(dut, core, clock=dut.clk, reset=dut.rst, stall=0.2, channels=chans)
        t = await host.read(line, "own")        # MemRd(A, SnpInv): t.grant == "E"
        await host.run_random(5000, hot_lines)
    """

    def __init__(self, dut, core: HostCore, *, clock, reset=None, stall=0.0, channels=None,
                 stall_mean=3.0):
        from hw.cxl.messages import message_layout
        self.dut = dut
        self.core = core
        self.clock = clock
        own = channels is None
        self.channels = channels if channels is not None else ChannelSet(dut, clock, reset)
        rng = random.Random(core.seed * 1_000_003 + 17)
        names = OUT_CHANNELS + IN_CHANNELS
        stalls = stall if isinstance(stall, dict) else {c: stall for c in names}

        def pauses(ch):
            p = stalls.get(ch, 0.0)
            return bursty_pauses(random.Random(rng.getrandbits(32)), p, stall_mean) if p else None

        for ch in OUT_CHANNELS:
            self.channels.add_out(ch, message_layout(ch), self._popper(ch), core.on_sent,
                                  pauses(ch))
        self.channels.add_in("s2m_ndr", message_layout("s2m_ndr"), core.on_ndr, pauses("s2m_ndr"))
        self.channels.add_in("s2m_drs", message_layout("s2m_drs"), core.on_drs, pauses("s2m_drs"))
        self.channels.add_in("s2m_bisnp", message_layout("s2m_bisnp"), core.on_bisnp,
                             pauses("s2m_bisnp"))
        self.channels.every_cycle.append(core.tick)
        if own:
            self.channels.start()

    def _popper(self, ch):
        pop_due = self.core.pop_due

        def pop(cycle):
            m = pop_due(ch, cycle)
            return None if m is None else (m.payload, m)
        return pop

    @property
    def cycle(self) -> int:
        return self.channels.cycle

    async def wait_cycles(self, n: int):
        from cocotb.triggers import ClockCycles
        await ClockCycles(self.clock, n)

    async def wait_txn(self, txn: Txn, timeout: int = 20000) -> Txn:
        from cocotb.triggers import ClockCycles, Event, First
        if txn.done:
            return txn
        ev = Event()
        txn.callbacks.append(lambda t: ev.set())
        res = await First(ev.wait(), ClockCycles(self.clock, timeout))
        if not txn.done:
            raise AssertionError(f"{txn.describe()} not complete after {timeout} cycles "
                                 f"(ndr={txn.ndr}, drs={txn.drs}, seed {self.core.seed})")
        del res
        return txn

    # ---- directed operations -----------------------------------------------------------
    async def request(self, kind: str, line: int, *, wait=True, **kw) -> Txn:
        txn = self.core.issue(kind, line, **kw)
        return await self.wait_txn(txn) if wait else txn

    async def read(self, line: int, kind: str = "shared", **kw) -> Txn:
        """``kind``: shared (MemRd S), own (MemRd A), data (MemRdData), cur (MemRd SnpCur)."""
        return await self.request("rd_" + kind, line, **kw)

    async def write(self, line: int, data: bytes, be: int = ALL_BE, *, meta="I", poison=0,
                    **kw) -> Txn:
        """Uncached write of new data from I: MemWr (MemWrPtl when ``be`` is partial)."""
        kind = {"I": "uc_write", "noop": "uc_write_noop"}[meta]
        if be != ALL_BE and kind == "uc_write":
            kind = "uc_write_ptl"
        return await self.request(kind, line, data=data, be=be, poison=poison, **kw)

    async def writeback(self, line: int, keep: str = "I", **kw) -> Txn:
        """Write back a dirty line: keep "I" (drop), "E", "S" or "noop" (No-Op meta, keep E)."""
        kind = {"I": "wb_drop", "E": "wb_keep_e", "S": "wb_keep_s", "noop": "wb_noop"}[keep]
        return await self.request(kind, line, **kw)

    async def evict(self, line: int, **kw):
        """Drop a line with notice: MemClnEvct when clean, MemWr(I) when dirty; None from I."""
        st = self.core.state(line)
        if st == "M":
            return await self.request("wb_drop", line, **kw)
        if st in "SE":
            return await self.request("cln_evct", line, **kw)
        return None

    async def invalidate(self, line: int, own=True, nt=False, **kw) -> Txn:
        kind = ("invnt_" if nt else "inv_") + ("own" if own else "flush")
        return await self.request(kind, line, **kw)

    async def raw(self, channel: str, wait=True, **kw):
        txn = self.core.raw(channel, **kw)
        if txn is None or not wait:
            return txn
        return await self.wait_txn(txn)

    def load(self, line: int) -> bytes:
        return self.core.load(line)

    def store(self, line: int, data: bytes, be: int = ALL_BE):
        self.core.store(line, data, be)

    async def drain(self, timeout: int = 200_000, poll: int = 8):
        """Wait until the host has nothing queued or outstanding (checked every ``poll``
        cycles)."""
        from cocotb.triggers import ClockCycles
        for _ in range(0, timeout, poll):
            if self.core.idle():
                return
            await ClockCycles(self.clock, poll)
        raise AssertionError(f"host not idle after {timeout} cycles: outstanding "
                             f"{[t.describe() for t in self.core.txns.values()][:8]}, busy lines "
                             f"{[hex(a) for a in self.core.busy_lines()][:8]} (seed "
                             f"{self.core.seed})")

    async def run_random(self, n_messages: int, hot_lines, mix=None, timeout: int | None = None):
        """Random legal traffic on ``hot_lines`` until ``n_messages`` host messages were queued,
        then drain. Returns the core's summary."""
        self.core.start_random(n_messages, hot_lines, mix)
        await self.drain(timeout or 2000 + 400 * n_messages)
        return self.core.summary()
