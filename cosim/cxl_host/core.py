"""The CXL.mem host's transaction core (:class:`HostCore`): per-line MESI state and data,
outstanding transactions by tag, per-channel output queues with adversarial delays, and the
violation record. Pure Python: time is a cycle number the caller supplies (the cocotb adapter
:class:`cosim.cxl_host.host.CxlHost`, or a fake device in tests/model/test_cxl_host.py).

The protocol behaviour lives in three mixins, one per side of the protocol:
:class:`~.requests.HostRequests` (issuing), :class:`~.responses.HostResponses` (NDR/DRS) and
:class:`~.snoops.HostSnoops` (BISnp/BIConflict).
"""
from __future__ import annotations

import heapq
import random
from collections import deque

from .protocol import (
    Conflict, _fmt, HostKnobs, HostViolation, HostViolationError, _Line, OUT_CHANNELS, OutMsg,
    _REQ, Snoop, Txn, _UNCACHED_WRITES,
)
from .requests import HostRequests
from .responses import HostResponses
from .snoops import HostSnoops

__all__ = ["HostCore"]


class HostCore(HostRequests, HostResponses, HostSnoops):
    """The host: MESI state per line, CXL.mem host protocol, checks. See the module docstring.

    ``checker``: an object with ``write(line, data, be, t_start, t_end)`` and
    ``read(line, data, t_start, t_end, who=..., poison=...)`` (``sw_model.coherence
    .LineValueChecker``), or None. ``reference``: a :class:`Reference` (or any object with
    ``expect(channel, hdr)``), or None. ``strict``: raise :class:`HostViolationError` at the
    first violation instead of only recording it in :attr:`violations`.
    ``observers``: objects notified of host events (``cosim.coherence_check``): any of
    ``on_state(line, old, new, cycle)``, ``on_txn_issue(txn, cycle)``,
    ``on_txn_done(txn, cycle)``, ``on_conflict(conflict, cycle)`` (a BI-ConflictAck arrived;
    ``conflict.late`` says how it was classified).
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
        self.violations: list[HostViolation] = []
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
        v = HostViolation(self.now, rule, line, message)
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

    # ------------------------------------------------------------------ reports
    def summary(self) -> dict:
        states = {s: 0 for s in "ISEM"}
        for ln in self.lines.values():
            states[ln.state] += 1
        return {"seed": self.seed, "cycle": self.now, "messages_sent": self.messages_sent,
                "violations": len(self.violations), "outstanding": len(self.txns),
                "states": states, **self.stats, "kinds": dict(sorted(self.kind_counts.items()))}
