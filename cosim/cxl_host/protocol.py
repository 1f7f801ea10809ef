"""Host-side vocabulary of the CXL.mem caching host: line and byte-enable constants, the request
kinds a host may issue from each state, message payload builders and formatting, the records of
transactions, snoops and conflicts, the host's knobs, the violation record, and the coherence
reference it checks answers against. Pure Python (no cocotb)."""
from __future__ import annotations

from dataclasses import dataclass, field

from hw.cxl_encodings import (
    BIRspOpcode as BR, BISnpOpcode as BS, DRSOpcode as DR, MetaField as MF, MetaValue as MV,
    NDROpcode as ND, ReqOpcode as RQ, RwDOpcode as RW, SnpType as ST,
)
LINE_BYTES = 64
ALL_BE = (1 << LINE_BYTES) - 1
ONES = b"\xff" * LINE_BYTES
ZERO_LINE = bytes(LINE_BYTES)
OUT_CHANNELS = ("m2s_req", "m2s_rwd", "m2s_birsp")
IN_CHANNELS = ("s2m_ndr", "s2m_drs", "s2m_bisnp")


class IllegalHostOp(ValueError):
    """A directed operation the host may not issue from the line's current state."""


class HostViolationError(AssertionError):
    """A :class:`HostViolation` raised at once (``HostCore(strict=True)``)."""


@dataclass(frozen=True, slots=True)
class HostViolation:
    """A protocol or coherence rule the device broke, as the host saw it at ``cycle``
    (recorded in ``HostCore.violations``)."""
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
