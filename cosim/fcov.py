"""Functional coverage model of the cosim tier (cocotb-coverage), sampled by the monitors.

Off unless ``TRAININGCXL_FCOV=<dir>`` is set (``trainingcxl coverage`` sets it): then the
coherence scoreboard and the device driver call the ``sample_*`` functions below at transaction
level (one call per M2S message, BISnp, finished Req, BI-ConflictAck, completion record,
doorbell or end of a CPL_HEAD wait, never per cycle), and :func:`write` exports the bins of this
simulator process to ``<dir>/<pid>.json`` (``trainingcxl.coverage.functional`` merges the
files). When off, every function returns at once and cocotb-coverage is not imported.

Coverage items (bins are listed in full by :func:`bins`):

- ``dcoh.req``: legal M2S Req (opcode/SnpType/MetaField-MetaValue as in
  ``sw_model.coherence``'s table) × snoop-filter state before it (I/S/A, as granted to the host
  at the boundary) × outcome (``hit``: the line was tracked; ``miss``: not tracked, no victim;
  ``victim``: not tracked and a BISnp to another line of the same set went out while it was
  open). Bins the design makes impossible are not bins: hit needs S/A, miss/victim need I.
  The victim is attributed at the boundary, not seen inside the DCOH: a BISnpInv (the kind
  victims use) to another line of the same snoop-filter set while an allocating Req that
  missed is open. A device write or RdOwn snooping such a line in that window counts too, so
  ``victim`` is an upper bound; Reqs that never allocate (:data:`NO_ALLOC`) are never marked.
- ``dcoh.rwd``: RwD opcode × MetaField-MetaValue × poison (BIConflict one bin).
- ``dcoh.conflict``: BIConflicts by the host model's classification when its BI-ConflictAck
  arrives (``cosim.cxl_host``, the ``late``/``early`` counts of ``trainingcxl stress``):
  ``late``, the conflicting Req was already answered (its Cmp came before the Ack), or
  ``early``, it was not. ``dcoh.conflict_req``: the same × the legal-Req bin label of that Req
  (only :data:`CONFLICT_REQS`: MemSpecRd is never pending, so never conflicts).
- ``dcoh.bisnp``: BISnp opcode; ``dcoh.birsp``: BIRsp opcode.
- ``cmd.cpl``: descriptor kind × completion status (``hw.encodings.DeviceError``) of every
  completion record the driver reads; the CSR-only codes are not bins.
- ``cmd.ring``: command/completion ring states seen by the device driver at its doorbells
  (accepted CMD_TAIL writes) and at the end of its waits for CPL_HEAD (docs/training.md
  section 3; ``size`` = CMD_SIZE, ``n`` = descriptors the doorbell adds). "Outstanding" counts
  the descriptors rung and not completed as of the driver's last CPL_HEAD read (0 after a
  reset or a ring configuration); it can only overstate, so when it is not 0 the driver reads
  CPL_HEAD once more right after the doorbell and counts from that value (a lower bound, so
  ``busy`` and ``full`` are never hit by a stale count). Bins (:data:`RING_BINS`):
  ``idle``: a doorbell onto an empty ring (the device had drained it);
  ``busy``: a doorbell while earlier descriptors were still outstanding (appending to a
  non-empty ring);
  ``wrap``: a doorbell whose descriptors run past the ring's last slot into slot 0
  (old tail + n > size);
  ``tail_zero``: a doorbell whose descriptors end in the last slot, so CMD_TAIL is written 0
  (old tail + n == size);
  ``full``: a doorbell that leaves ``size - 1`` descriptors outstanding (the ring's capacity);
  ``drained``: a wait that ended with CPL_HEAD equal to CMD_TAIL (every descriptor rung has
  completed: the device found the ring empty);
  ``cpl_wrap``: a wait that ended with CPL_HEAD having passed the completion ring's last slot
  since the driver's previous CPL_HEAD read (previous head + completions >= size).
- ``crash.cut``: phase of a crash-campaign cut × the kind of each write in flight at it
  (``trainingcxl/crash/tb.py``, sampled once per cut where ``power_fail`` takes the image:
  each crash point's cut of the image pass and each nested failure's cut of a recovery).
  Phase (:data:`CRASH_PHASES`): ``RECOVER`` (between CONTROL.RECOVER and READY), the kind of
  the descriptor executing (from its doorbell, or the previous descriptor's completion write
  being acknowledged, until its own completion write is), or ``none`` (the host's time between
  doorbells). In flight (:data:`CRASH_WRITES`, :func:`crash_write_kind`): every write the PMEM
  model holds applied-unacknowledged or accepted-unapplied, by the region of its address:
  ``table`` (row writes, rollbacks), ``log`` (undo records), ``superblock``, ``slots`` (MLP
  snapshot slots), ``cpl`` / ``cmd`` (the completion / command ring in staging), ``staging``
  (the rest of staging), or ``none`` when nothing is in flight. W beats whose AW has not
  arrived carry no address and are not classified.
"""
from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

from hw.cxl_encodings import (BIRspOpcode, BISnpOpcode, MetaField, MetaValue, ReqOpcode,
                              RwDOpcode, SnpType)
from hw.encodings import DescKind, DeviceError

__all__ = ["FCOV_ENV", "enabled", "bins", "req_combo", "rwd_combo", "sample_req",
           "sample_rwd", "sample_conflict", "sample_bisnp", "sample_birsp", "sample_cpl",
           "ring_doorbell_bins", "ring_wait_bins", "sample_doorbell", "sample_wait",
           "crash_write_kind", "crash_phase", "descriptor_windows", "crash_cut_bins",
           "sample_crash_cut", "write"]

FCOV_ENV = "TRAININGCXL_FCOV"


def enabled() -> bool:
    return bool(os.environ.get(FCOV_ENV, "").strip())


def _n(enum_cls, v) -> str:
    try:
        return enum_cls(v).name
    except ValueError:
        return f"rsvd{v}"


def _meta(field, value) -> str:
    if field == MetaField.NO_OP:
        return "noop"
    return _n(MetaValue, value) if field == MetaField.META0_STATE else f"mf{field}"


# The legal Reqs of sw_model.coherence (docs/coherence.md "Legal requests"); "*" = any encoding
REQ_COMBOS = (
    ("MEM_RD", "SNP_INV", "A"), ("MEM_RD", "SNP_DATA", "S"), ("MEM_RD", "SNP_CUR", "noop"),
    ("MEM_RD_DATA", "SNP_DATA", "*"), ("MEM_INV", "SNP_INV", "A"), ("MEM_INV", "SNP_INV", "I"),
    ("MEM_INV_NT", "SNP_INV", "A"), ("MEM_INV_NT", "SNP_INV", "I"),
    ("MEM_CLN_EVCT", "NO_OP", "I"), ("MEM_SPEC_RD", "*", "*"),
)
SF_STATES = ("I", "S", "A")
# Legal Reqs after which the snoop filter does not hold the line (sw_model.coherence: sf_after
# "I" or untracked): they never allocate an entry, so never need a victim.
NO_ALLOC = ("MEM_RD/SNP_CUR/noop", "MEM_INV/SNP_INV/I", "MEM_INV_NT/SNP_INV/I",
            "MEM_CLN_EVCT/NO_OP/I", "MEM_SPEC_RD/*/*")
# Legal Reqs that can meet a BISnp while pending: all but MemSpecRd (a hint, no transaction)
CONFLICT_REQS = tuple("/".join(c) for c in REQ_COMBOS if c[0] != "MEM_SPEC_RD")
DESC_KINDS = tuple(k.name for k in DescKind) + ("unknown",)
# codes that only the ERR_CODE CSR reports (doorbell and CSR errors), never a completion record
CSR_ONLY = ("RING_OVERFLOW", "DOORBELL_RANGE", "RING_CONFIG", "CSR_RO", "CSR_ADDR", "NOT_READY",
            "CSR_BUSY")
CPL_CODES = tuple(c.name for c in DeviceError if c.name not in CSR_ONLY)
RING_BINS = ("idle", "busy", "wrap", "tail_zero", "full", "drained", "cpl_wrap")
CRASH_PHASES = ("none", "RECOVER") + tuple(k.name for k in DescKind)
CRASH_WRITES = ("none", "table", "log", "superblock", "slots", "cpl", "cmd", "staging")


def may_take_victim(combo: str | None, sf: str, bisnp_opcode) -> bool:
    """Whether a BISnp of ``bisnp_opcode`` to another line of the set can be the victim snoop of
    an open Req (``combo``, SF state ``sf`` before it)."""
    return (combo is not None and combo not in NO_ALLOC and sf == "I"
            and bisnp_opcode == BISnpOpcode.BISNP_INV)


def req_combo(opcode, snp_type, meta_field, meta_value):
    """The legal-Req bin label of a header, or None for a Req outside the legal table."""
    op, snp, meta = _n(ReqOpcode, opcode), _n(SnpType, snp_type), _meta(meta_field, meta_value)
    for c in REQ_COMBOS:
        if c[0] == op and c[1] in ("*", snp) and c[2] in ("*", meta):
            return "/".join(c)
    return None


def rwd_combo(opcode, meta_field, meta_value, poison):
    op = _n(RwDOpcode, opcode)
    if op == "BI_CONFLICT":
        return "BI_CONFLICT"
    return f"{op}/{_meta(meta_field, meta_value)}/poison{int(poison)}"


def bins() -> dict:
    """Every bin of every coverage item (name -> list of bin labels)."""
    req = []
    for c in REQ_COMBOS:
        lab = "/".join(c)
        req += [f"{lab}|I|miss", f"{lab}|I|victim", f"{lab}|S|hit", f"{lab}|A|hit"]
    rwd = ["BI_CONFLICT"] + [f"{op}/{m}/poison{p}" for op in ("MEM_WR", "MEM_WR_PTL")
                             for m in ("I", "A", "S", "noop") for p in (0, 1)]
    return {
        "dcoh.req": req,
        "dcoh.rwd": rwd,
        "dcoh.conflict": ["early", "late"],
        "dcoh.conflict_req": [f"{t}|{c}" for t in ("early", "late") for c in CONFLICT_REQS],
        "dcoh.bisnp": [o.name for o in BISnpOpcode],
        "dcoh.birsp": [o.name for o in BIRspOpcode],
        "cmd.cpl": [f"{k}|{c}" for k in DESC_KINDS for c in CPL_CODES],
        "cmd.ring": list(RING_BINS),
        "crash.cut": [f"{p}|{w}" for p in CRASH_PHASES for w in CRASH_WRITES],
    }


_items = None        # name -> sampling function (cocotb-coverage CoverPoint), once enabled
_dirty = False


def _setup():
    global _items
    if _items is not None:
        return _items
    from cocotb_coverage.coverage import CoverPoint
    _items = {}
    for name, labels in bins().items():
        @CoverPoint(f"tcxl.{name}", xf=lambda label: label, bins=list(labels))
        def sample(label):
            pass
        _items[name] = sample
    atexit.register(write)
    return _items


def _sample(name: str, label: str):
    global _dirty
    if not enabled():
        return
    _setup()[name](label)
    _dirty = True


def sample_req(combo: str | None, sf: str, victim: bool):
    """A finished legal Req (``combo`` from :func:`req_combo`; None: not legal, not sampled)."""
    if combo is None:
        return
    outcome = "hit" if sf != "I" else ("victim" if victim else "miss")
    _sample("dcoh.req", f"{combo}|{sf}|{outcome}")


def sample_rwd(opcode, meta_field, meta_value, poison):
    _sample("dcoh.rwd", rwd_combo(opcode, meta_field, meta_value, poison))


def sample_conflict(late: bool, combo: str | None):
    """A BIConflict whose BI-ConflictAck arrived: ``late`` as the host model classified it,
    ``combo`` the :func:`req_combo` of the Req it conflicted with (None: not a legal Req; only
    ``dcoh.conflict`` is sampled)."""
    when = "late" if late else "early"
    _sample("dcoh.conflict", when)
    if combo is not None:
        _sample("dcoh.conflict_req", f"{when}|{combo}")


def sample_bisnp(opcode):
    _sample("dcoh.bisnp", _n(BISnpOpcode, opcode))


def sample_birsp(opcode):
    _sample("dcoh.birsp", _n(BIRspOpcode, opcode))


def sample_cpl(kind, status):
    k = DescKind(kind).name if kind in DescKind._value2member_map_ else "unknown"
    _sample("cmd.cpl", f"{k}|{_n(DeviceError, status)}")


def ring_doorbell_bins(size: int, old_tail: int, new_tail: int, outstanding: int) -> list:
    """``cmd.ring`` bins of an accepted doorbell from ``old_tail`` to ``new_tail`` on a ring of
    ``size`` with ``outstanding`` descriptors not yet completed before it."""
    n = (new_tail - old_tail) % size
    if n == 0:
        return []
    out = ["busy" if outstanding else "idle"]
    if old_tail + n > size:
        out.append("wrap")
    elif old_tail + n == size:
        out.append("tail_zero")
    if outstanding + n == size - 1:
        out.append("full")
    return out


def ring_wait_bins(size: int, prev_head: int, head: int, tail: int) -> list:
    """``cmd.ring`` bins of a wait that ended with CPL_HEAD = ``head`` (``prev_head`` the
    driver's previous read, ``tail`` the last accepted doorbell)."""
    out = ["drained"] if head == tail else []
    done = (head - prev_head) % size
    if done and prev_head + done >= size:
        out.append("cpl_wrap")
    return out


def sample_doorbell(size: int, old_tail: int, new_tail: int, outstanding: int):
    for label in ring_doorbell_bins(size, old_tail, new_tail, outstanding):
        _sample("cmd.ring", label)


def sample_wait(size: int, prev_head: int, head: int, tail: int):
    for label in ring_wait_bins(size, prev_head, head, tail):
        _sample("cmd.ring", label)


def crash_write_kind(cfg, addr: int, cmd_ring: tuple, cpl_ring: tuple) -> str | None:
    """``crash.cut`` kind of a write to byte ``addr``: the region of ``cfg``
    (``hw.config.DeviceConfig``), with the rings (``(base, bytes)``, inside staging) apart;
    None outside every region."""
    for name, (base, size) in (("cmd", cmd_ring), ("cpl", cpl_ring)):
        if base <= addr < base + size:
            return name
    return cfg.region_of(addr)      # the region names are the labels


def descriptor_windows(doorbells, cpl_acks) -> list:
    """Execution windows ``[(start, end, kind)]`` (end exclusive) of the descriptors of a run.

    ``doorbells``: ``[(cycle, [kind, ...])]``, the cycle each doorbell was rung and the kinds
    of its descriptors in ring order; ``cpl_acks``: the B cycles of the completion-record
    writes, one per descriptor in execution order. The device runs one descriptor at a time and
    starts the next only after its completion write is acknowledged (docs/training.md section
    3), so descriptor ``j`` of a doorbell runs from the doorbell (``j`` = 0) or the previous
    acknowledgement until its own; at the acknowledgement's cycle it is done. Descriptors
    without an acknowledgement (a run cut short) get none: their window stays open."""
    out, acks = [], list(cpl_acks)
    n = 0
    for cycle, kinds in doorbells:
        start = cycle
        for kind in kinds:
            end = acks[n] if n < len(acks) else None
            n += 1
            out.append((start, end, kind))
            if end is None:
                return out
            start = end
    return out


def crash_phase(windows, cycle: int) -> str:
    """The phase of a cut at ``cycle``: the kind of the window ``[(start, end, kind)]`` holding
    it (``end`` None: open), ``none`` between windows."""
    for start, end, kind in windows:
        if start <= cycle and (end is None or cycle < end):
            return kind
    return "none"


def crash_cut_bins(phase: str, kinds) -> list:
    """``crash.cut`` labels of a cut in ``phase`` with writes of ``kinds`` in flight, one per
    kind (None, a write outside every region, has no bin); nothing in flight is ``none``."""
    kinds = list(kinds)
    if not kinds:
        return [f"{phase}|none"]
    got = sorted({k for k in kinds if k is not None}, key=CRASH_WRITES.index)
    return [f"{phase}|{k}" for k in got]


def sample_crash_cut(phase: str, kinds):
    for label in crash_cut_bins(phase, kinds):
        _sample("crash.cut", label)


def write():
    """Export this process's bins (hits per bin; labels outside the model counted apart) to
    ``$TRAININGCXL_FCOV/<pid>.json``. Cheap (a few hundred bins); called after samples that end
    a transaction group and at exit."""
    global _dirty
    if not enabled() or _items is None or not _dirty:
        return
    from cocotb_coverage.coverage import coverage_db
    out = Path(os.environ[FCOV_ENV])
    out.mkdir(parents=True, exist_ok=True)
    doc = {}
    for name in _items:
        item = coverage_db[f"tcxl.{name}"]
        doc[name] = {str(k): int(v) for k, v in item.detailed_coverage.items()}
    tmp = out / f".{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, out / f"{os.getpid()}.json")
    _dirty = False
