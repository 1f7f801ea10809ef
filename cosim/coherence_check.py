"""Boundary scoreboards for the DCOH's coherence rules (architecture 5.3), pure Python.

They watch what crosses the DUT's boundary (the six CXL.mem channels through the host model's
observer hooks, the device request port, the AXI media port, the ``err`` outputs) and check the
rules that are visible there. The RTL carries in-RTL Asserts for the local ones (tracker
soundness, stream stability).

:class:`CoherenceScoreboard` checks, per rule:

1. *Inclusivity.* Every host state change is checked by ``sw_model.coherence.HostPermission
   .check_host`` (the host holds only what a Cmp-S/Cmp-E granted and no BIRsp/MemWr/MemInv
   took back). Capacity: the lines the host holds (S/E/M) in one snoop-filter set never
   outnumber ``sf_ways`` (an inclusive SF must back-invalidate a victim before granting a new
   line in a full set; also rule 8).
2. *Device writes* and 3. *device reads* on the media port, two ways:

   - **sound, by attribution**: an AW (AR) whose valid rises for line X while no host media
     write (read) to X is outstanding belongs to a device request to X that was accepted on
     ``dev`` at cycle q and has no response yet (every such request counts; q is the oldest).
     If the host has *held* X continuously from a cycle <= q until the AW/AR valid rose, the
     DCOH decided that access while the host held the line: a device write (or RdOwn) with the
     host in S/E/M, or a RdCur with the host in E/M, is a violation. (The decision lies in
     [q, valid rise]; a grant the host received before q was served before q.) A media
     access with neither a host nor a device request outstanding to its line is "media_spurious".
   - optionally (``perm_media=True``; the bench's ``BenchConfig.strict_media``),
     HostPermission.device_access at the valid rise: the grants seen at the boundary at that
     cycle. Stricter than the contract: a device write decided while the SF said I may still
     sit in the DCOH's media queue when the host is granted E by a MemInv(A) (no media read to
     wait for); that is coherent as long as the device write reaches the media before any later
     host write of the line, so this check can flag a correct DCOH. Off by default.
5. HostPermission.response (a Req accepted at or after a BISnp to its line is not answered
   before that BISnp's BIRsp); the host model checks the same per tag.
6. The host model checks it per conflict (an early conflict's Req must not be answered before
   the snoop's BIRsp; MemData before the Ack with the Cmp after it means the Ack passed a Cmp).
7. HostPermission.bisnp (BITag in range, not reused while outstanding, one BISnp per line)
   and the host model (the same from its side, plus bi_id 0).
8. Capacity as in rule 1. "Victim snoops do not stall the Req channel" is a liveness
   property: tests.cosim.dcoh.test_dcoh.victim_snoop_does_not_block_other_requests checks it directly
   (Reqs to other sets complete while a victim's BIRsp is withheld).

Errors: every ``err`` pulse must match an expected error (the reference ``Answer.error`` of a
host request, the ``DcohError`` HostPermission.birsp returns for a BIRsp, or one a test
registers with :meth:`CoherenceScoreboard.expect_error`) and every expected error must be seen.

Violations are collected in :attr:`violations` (``sw_model.coherence.CoherenceViolation``) unless
``raise_on_violation``.
"""
from __future__ import annotations

from collections import Counter, deque

from cosim import fcov
from hw.cxl_encodings import DcohError, NDROpcode as ND
from sw_model.coherence import HostPermission, CoherenceViolation

__all__ = ["CoherenceScoreboard"]

_HELD = {"S": 1, "E": 2, "M": 2}


class _LineHold:
    __slots__ = ("since_any", "since_excl")

    def __init__(self):
        self.since_any = None    # cycle since which the host holds S/E/M without a break
        self.since_excl = None   # cycle since which it holds E/M without a break


class CoherenceScoreboard:
    """See the module docstring. Attach with ``HostCore(observers=[sb])`` and feed the device
    port and media events from the bench (:meth:`dev_request`, :meth:`dev_response`,
    :meth:`media_access`, :meth:`err_pulse`)."""

    def __init__(self, cfg, *, raise_on_violation=False, perm_media=False):
        self.cfg = cfg
        self.raise_on_violation = raise_on_violation
        self.perm = HostPermission(cfg, raise_on_violation=False)
        self.perm_media = perm_media
        self.violations: list[CoherenceViolation] = []
        self._hold: dict[int, _LineHold] = {}
        self._held_per_set: Counter = Counter()
        self._state: dict[int, str] = {}
        # host media operations outstanding per line (issue .. completion)
        self._host_rd: Counter = Counter()
        self._host_wr: Counter = Counter()
        # device requests accepted and not answered: line -> deque of (q, op); op "rd_cur",
        # "rd_own" or "wr"; by id FIFOs for matching responses
        self._dev_rd: dict[int, list] = {}
        self._dev_wr: dict[int, list] = {}
        self._dev_rd_by_id: dict[int, deque] = {}
        self._dev_wr_by_id: dict[int, deque] = {}
        # errors
        self.expected_errors: Counter = Counter()
        self.seen_errors: list[tuple] = []
        self.stats = Counter()
        self._pending_checks = []
        self._err_mask = (1 << (cfg.addr_bits - 6)) - 1    # width of err_addr
        # functional coverage (cosim/fcov.py), off unless TRAININGCXL_FCOV is set:
        # line -> [legal-Req bin label, SF state before it, victim seen] of open Reqs
        self._fcov = fcov.enabled()
        self._fcov_open: dict[int, list] = {}

    # ------------------------------------------------------------------ reporting
    def _fail(self, rule, line, msg, times=None, who="dcoh"):
        v = CoherenceViolation(rule, line, msg, who=who, times=times)
        self.violations.append(v)
        if self.raise_on_violation:
            raise v
        return v

    def _collect(self):
        """Move HostPermission's violations into ours."""
        if self.perm.violations:
            self.violations.extend(self.perm.violations)
            self.perm.violations.clear()
            if self.raise_on_violation:
                raise self.violations[-1]

    def all_violations(self):
        self._collect()
        return list(self.violations)

    # ------------------------------------------------------------------ host observer hooks
    def on_state(self, line, old, new, cycle):
        h = self._hold.get(line)
        if h is None:
            h = self._hold[line] = _LineHold()
        self._state[line] = new
        set_idx = line & (self.cfg.sf_sets - 1)
        was, now = old in _HELD, new in _HELD
        if now and not was:
            h.since_any = cycle
            self._held_per_set[set_idx] += 1
            n = self._held_per_set[set_idx]
            if n > self.cfg.sf_ways:
                held = sorted(a for a, s in self._state.items()
                              if s in _HELD and (a & (self.cfg.sf_sets - 1)) == set_idx)
                self._fail("rule 1/8", line, f"the host holds {n} lines of snoop-filter set "
                           f"{set_idx} ({', '.join(hex(a) for a in held)}) but the set has "
                           f"{self.cfg.sf_ways} ways: a victim was not back-invalidated",
                           times=(cycle,))
        elif was and not now:
            h.since_any = None
            self._held_per_set[set_idx] -= 1
        if new in "EM":
            if old not in "EM":
                h.since_excl = cycle
        else:
            h.since_excl = None
        if new != "I":
            # checked once the message being processed (the grant itself) has been seen
            self._pending_checks.append((line, cycle))

    def flush(self, cycle=None):
        """Run the rule-1 checks of host state changes noted since the last message."""
        if self._pending_checks:
            checks, self._pending_checks = self._pending_checks, []
            for line, t in checks:
                st = self._state.get(line, "I")
                if st != "I":
                    self.perm.check_host(line, st, t)
            self._collect()

    def on_txn_issue(self, txn, cycle):
        e = txn.expect
        if e is None:
            return
        if getattr(e, "media_read", False):
            self._host_rd[txn.line] += 1
        if getattr(e, "media_write", False):
            self._host_wr[txn.line] += 1
        err = getattr(e, "error", DcohError.NONE)
        if err != DcohError.NONE:
            self.expected_errors[(int(err), txn.line & self._err_mask)] += 1

    def on_txn_done(self, txn, cycle):
        if self._fcov and txn.channel == "m2s_req":
            ent = self._fcov_open.pop(txn.line, None)
            if ent is not None:
                fcov.sample_req(*ent)
        e = txn.expect
        if e is None:
            return
        if getattr(e, "media_read", False):
            self._host_rd[txn.line] -= 1
        if getattr(e, "media_write", False):
            self._host_wr[txn.line] -= 1

    def on_conflict(self, c, cycle):
        if self._fcov:
            h = c.req.payload["hdr"]
            fcov.sample_conflict(c.late, fcov.req_combo(h["opcode"], h["snp_type"],
                                                        h["meta_field"], h["meta_value"]))

    def on_m2s(self, channel, payload, cycle, obj):
        h = payload["hdr"]
        if channel == "m2s_req":
            if self._fcov:
                combo = fcov.req_combo(h["opcode"], h["snp_type"], h["meta_field"],
                                       h["meta_value"])
                sf = {"E": "A"}.get(self.perm.state(h["addr"]), self.perm.state(h["addr"]))
                if combo is not None and combo.startswith("MEM_SPEC_RD"):
                    fcov.sample_req(combo, sf, False)     # a hint: no response, no transaction
                else:
                    self._fcov_open[h["addr"]] = [combo, sf, False]
            self.perm.req(h["addr"], h["opcode"], h["snp_type"], h["meta_field"],
                          h["meta_value"], cycle)
        elif channel == "m2s_rwd":
            self.perm.rwd(h["addr"], h["opcode"], h["meta_field"], h["meta_value"], cycle)
            if self._fcov:
                fcov.sample_rwd(h["opcode"], h["meta_field"], h["meta_value"], h["poison"])
        else:
            if self._fcov:
                fcov.sample_birsp(h["opcode"])
            err = self.perm.birsp(h["bi_tag"], h["opcode"], cycle)
            if err != DcohError.NONE:
                # the DCOH reports it with the line of the BISnp, unknown for a stray tag
                self.expected_errors[(int(err), None)] += 1
        self.flush()

    def on_s2m(self, channel, msg, cycle, txn):
        h = msg["hdr"]
        if channel == "s2m_bisnp":
            self.perm.bisnp(h["addr"], h["opcode"], h["bi_tag"], cycle)
            self.stats["bisnp"] += 1
            if self._fcov:
                fcov.sample_bisnp(h["opcode"])
                mask = self.cfg.sf_sets - 1
                for line, ent in self._fcov_open.items():
                    if line != h["addr"] and (line & mask) == (h["addr"] & mask) and \
                            fcov.may_take_victim(ent[0], ent[1], h["opcode"]):
                        ent[2] = True
        elif txn is not None and txn.channel == "m2s_req" and txn.kind != "conflict":
            if channel == "s2m_ndr" and h["opcode"] == ND.BI_CONFLICT_ACK:
                return
            last = txn.done and txn.t_done == cycle
            self.perm.response(txn.line, cycle, ndr=h["opcode"] if channel == "s2m_ndr" else None,
                               last=last)
        self.flush()

    # ------------------------------------------------------------------ device port
    def dev_request(self, kind: str, dev_id: int, line: int, cycle: int):
        """A device request accepted on ``dev`` at ``cycle``: kind "rd_cur", "rd_own", "wr"."""
        book, by_id = ((self._dev_wr, self._dev_wr_by_id) if kind == "wr"
                       else (self._dev_rd, self._dev_rd_by_id))
        ent = (cycle, kind, line)
        book.setdefault(line, []).append(ent)
        by_id.setdefault(dev_id, deque()).append(ent)

    def dev_response(self, write: bool, dev_id: int, cycle: int):
        book, by_id = ((self._dev_wr, self._dev_wr_by_id) if write
                       else (self._dev_rd, self._dev_rd_by_id))
        q = by_id.get(dev_id)
        if not q:
            self._fail("dev_port", None, f"{'wr' if write else 'rd'}_resp for id {dev_id} with "
                       "no request outstanding", times=(cycle,))
            return None
        ent = q.popleft()
        lst = book[ent[2]]
        lst.remove(ent)
        if not lst:
            del book[ent[2]]
        return ent

    # ------------------------------------------------------------------ media port
    def media_access(self, write: bool, line: int, cycle: int):
        """An AR (``write`` False) or AW whose valid rose at ``cycle`` for ``line``."""
        self.stats["media_wr" if write else "media_rd"] += 1
        host_out = (self._host_wr if write else self._host_rd)[line] > 0
        devs = (self._dev_wr if write else self._dev_rd).get(line)
        if host_out:
            if devs:
                self.stats["media_ambiguous"] += 1
            return
        if not devs:
            self._fail("media_spurious", line, f"media {'write' if write else 'read'} with no "
                       "host or device request to the line outstanding", times=(cycle,))
            return
        self.stats["media_dev"] += 1
        q = min(e[0] for e in devs)
        h = self._hold.get(line)
        if h is not None:
            if write or any(e[1] == "rd_own" for e in devs) and \
                    all(e[1] != "rd_cur" for e in devs):
                since, what = h.since_any, "S/E/M"
            else:
                since, what = h.since_excl, "E/M"
            if since is not None and since <= q:
                rule = "rule 2" if write else "rule 3"
                kinds = ",".join(sorted({e[1] for e in devs}))
                self._fail(rule, line, f"device {kinds} accepted at {q} reached the media port at "
                           f"{cycle} while the host held the line ({what}, "
                           f"{self._state.get(line)}) without a break since {since}",
                           times=(since, q, cycle))
        if self.perm_media:
            self.perm.device_access(line, write, cycle)
            self._collect()

    # ------------------------------------------------------------------ errors
    def expect_error(self, code, line=None, n=1):
        self.expected_errors[(int(code), None if line is None else line & self._err_mask)] += n

    def err_pulse(self, code: int, line: int, cycle: int):
        self.seen_errors.append((cycle, code, line))
        for key in ((code, line), (code, None)):
            if self.expected_errors[key] > 0:
                self.expected_errors[key] -= 1
                return
        self._fail("err", line, f"err pulse {DcohError(code).name if code in DcohError._value2member_map_ else code} "
                   "that no request explains", times=(cycle,))

    def finish(self):
        """End of test: every expected error seen. Returns all violations."""
        if self._fcov:
            fcov.write()
        missing = {k: n for k, n in self.expected_errors.items() if n > 0}
        for (code, line), n in missing.items():
            name = DcohError(code).name if code in DcohError._value2member_map_ else code
            self._fail("err", line, f"{n} expected err pulse(s) {name} never seen")
        self.expected_errors.clear()
        return self.all_violations()
