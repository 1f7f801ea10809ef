"""Coherence reference of the DCOH (docs/coherence.md, architecture 5.3) for the cocotb checkers.

Independent of the RTL in ``hw/dcoh/``: the tables below are written from the document, not shared
with the hardware. Pure Python; from ``hw`` it imports only ``hw.config`` and ``hw.cxl_encodings``.

Contents:

- ``expected_req(cfg, hdr)`` / ``expected_rwd(cfg, hdr, sf=None)``: the ``Answer`` the DCOH gives
  one M2S Req / RwD (responses, snoop-filter update, error, media access, host grant).
- ``birsp_allowed(bisnp, birsp)`` and ``sf_after_birsp(birsp)``: the BIRsp rules.
- ``HostPermission``: per line, the most the host may hold given the messages seen at the device
  boundary; checks rules 1, 2, 3, 5 and 7 of architecture 5.3 from boundary traffic.
- ``LineValueChecker``: "every read returns the last value written to the line", with
  concurrency expressed by time intervals.
- ``CoherenceViolation``: the exception every checker raises (an ``AssertionError``).

Times are integer cycles throughout; ``line`` is a line address (byte address >> 6).
"""
from bisect import bisect_left, insort
from dataclasses import dataclass, replace
from operator import attrgetter, index

from hw.config import HOST_RO_REGIONS, HOST_RW_REGIONS, LINE_BYTES, DeviceConfig
from hw.cxl_encodings import (M2S_REQ_FIELDS, M2S_RWD_FIELDS, BIRspOpcode, BISnpOpcode,
                              DcohError, DRSOpcode, MetaField, MetaValue, NDROpcode, ReqOpcode,
                              RwDOpcode, SnpType)

__all__ = ["Answer", "CoherenceViolation", "HostPermission", "LineValueChecker", "NXM_DATA",
           "expected_req", "expected_rwd", "host_region", "birsp_allowed", "sf_after_birsp",
           "media_poison_after"]

# Data of a DRS MemData-NXM (always sent with poison 1)
NXM_DATA = b"\xff" * LINE_BYTES


class CoherenceViolation(AssertionError):
    """A coherence or data-value rule was broken by what the device did.

    ``rule`` names the broken rule ("value", "rule 1", ...), ``line`` is the line address,
    ``who`` the agent whose observation exposed it, ``times`` the cycles involved. ``str()`` is
    the full report (line address in hex, who, times, and for values a hexdump with the allowed
    candidates of every unexplained byte).
    """

    def __init__(self, rule: str, line: int | None, message: str, *, who: str | None = None,
                 times: tuple | None = None):
        self.rule, self.line, self.who, self.times, self.message = rule, line, who, times, message
        head = [f"{rule} violation"]
        if line is not None:
            head.append(f"line {line:#x} (byte address {line << 6:#x})")
        if who is not None:
            head.append(f"seen by {who}")
        if times is not None:
            head.append("t=" + "/".join(str(t) for t in times))
        super().__init__(", ".join(head) + ": " + message)


# =============================================================================================
# Answers to M2S Req / RwD
# =============================================================================================

@dataclass(frozen=True)
class Answer:
    """What the DCOH does with one M2S Req or RwD (docs/coherence.md, "Legal requests").

    - ``drs``: ``DRSOpcode.MEM_DATA``, ``DRSOpcode.MEM_DATA_NXM`` (data ``NXM_DATA``, poison 1)
      or None (no DRS).
    - ``ndr``: the NDR opcode or None (no NDR). Both responses carry the request's ``tag``.
    - ``sf_after``: snoop-filter state of the line after the request is served, "I"/"S"/"A", or
      None (unchanged / not tracked).
    - ``error``: the ``err_code`` pulsed with the line address (``DcohError.NONE`` if none).
    - ``media_read`` / ``media_write``: the request reads / writes the line on the media port.
    - ``grant``: what the host may hold after completion: "I", "S", "E" (exclusive clean, may
      turn M silently) or None (unchanged).
    - ``tag``: the request's tag, echoed by every response (BI-ConflictAck included).

    A Req with no response at all (``drs is None and ndr is None``) is a dropped MemSpecRd.
    """
    drs: DRSOpcode | None = None
    ndr: NDROpcode | None = None
    sf_after: str | None = None
    error: DcohError = DcohError.NONE
    media_read: bool = False
    media_write: bool = False
    grant: str | None = None
    tag: int = 0

    @property
    def responses(self) -> int:
        """Number of S2M messages answering the request (DRS plus NDR)."""
        return (self.drs is not None) + (self.ndr is not None)


_REQ_WIDTHS = dict(M2S_REQ_FIELDS)
_RWD_WIDTHS = dict(M2S_RWD_FIELDS)
_HDR_NAMES = ("opcode", "snp_type", "meta_field", "meta_value", "tag", "addr")
ANY = None    # wildcard in the tables below

# Legal Req combinations: (opcode, snp_type, meta_field, meta_value) -> answer in a coherent
# region (ANY matches every encoding of that field, reserved ones included).
_MD, _NXM = DRSOpcode.MEM_DATA, DRSOpcode.MEM_DATA_NXM
_REQ_TABLE = {
    (ReqOpcode.MEM_RD, SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.A):
        Answer(drs=_MD, ndr=NDROpcode.CMP_E, sf_after="A", media_read=True, grant="E"),
    (ReqOpcode.MEM_RD, SnpType.SNP_DATA, MetaField.META0_STATE, MetaValue.S):
        Answer(drs=_MD, ndr=NDROpcode.CMP_S, sf_after="S", media_read=True, grant="S"),
    (ReqOpcode.MEM_RD, SnpType.SNP_CUR, MetaField.NO_OP, ANY):
        Answer(drs=_MD, ndr=NDROpcode.CMP, media_read=True),
    (ReqOpcode.MEM_RD_DATA, SnpType.SNP_DATA, ANY, ANY):
        Answer(drs=_MD, ndr=NDROpcode.CMP_E, sf_after="A", media_read=True, grant="E"),
    (ReqOpcode.MEM_INV, SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.A):
        Answer(ndr=NDROpcode.CMP_E, sf_after="A", grant="E"),
    (ReqOpcode.MEM_INV, SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.I):
        Answer(ndr=NDROpcode.CMP, sf_after="I", grant="I"),
    (ReqOpcode.MEM_INV_NT, SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.A):
        Answer(ndr=NDROpcode.CMP_E, sf_after="A", grant="E"),
    (ReqOpcode.MEM_INV_NT, SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.I):
        Answer(ndr=NDROpcode.CMP, sf_after="I", grant="I"),
    (ReqOpcode.MEM_CLN_EVCT, SnpType.NO_OP, MetaField.META0_STATE, MetaValue.I):
        Answer(ndr=NDROpcode.CMP, sf_after="I", grant="I"),
}
# Legal MemWr/MemWrPtl combinations (SnpType No-Op): (meta_field, meta_value) -> answer
_WR_TABLE = {
    (MetaField.META0_STATE, MetaValue.I):
        Answer(ndr=NDROpcode.CMP, sf_after="I", media_write=True, grant="I"),
    (MetaField.META0_STATE, MetaValue.A):
        Answer(ndr=NDROpcode.CMP, sf_after="A", media_write=True, grant="E"),
    (MetaField.META0_STATE, MetaValue.S):
        Answer(ndr=NDROpcode.CMP, sf_after="S", media_write=True, grant="S"),
    (MetaField.NO_OP, ANY):
        Answer(ndr=NDROpcode.CMP, media_write=True),
}
_READ_OPS = (ReqOpcode.MEM_RD, ReqOpcode.MEM_RD_DATA)
_WRITE_OPS = (RwDOpcode.MEM_WR, RwDOpcode.MEM_WR_PTL)


def _fields(hdr, widths: dict, what: str) -> tuple:
    out = []
    for name in _HDR_NAMES:
        if name not in hdr:
            if name == "tag":
                out.append(0)
                continue
            raise ValueError(f"{what} header lacks field {name!r}")
        try:
            v = index(hdr[name])
        except TypeError:
            raise ValueError(f"{what}.{name}={hdr[name]!r} is not an integer") from None
        if not 0 <= v < (1 << widths[name]):
            raise ValueError(f"{what}.{name}={v!r} does not fit in {widths[name]} unsigned bits")
        out.append(v)
    return tuple(out)


def _lookup(table: dict, key: tuple):
    """Entry of ``table`` matching ``key``, trying ANY for trailing fields; None if illegal."""
    for k in (key, key[:-1] + (ANY,), key[:-2] + (ANY, ANY)):
        a = table.get(k)
        if a is not None:
            return a
    return None


def host_region(cfg: DeviceConfig, addr: int) -> str | None:
    """Region holding line address ``addr`` as the DCOH decodes it, or None (outside HDM).

    The DCOH uses the low ``addr_bits - 6`` bits; a non-zero upper part is outside HDM.
    """
    if addr >> (cfg.addr_bits - 6):
        return None
    return cfg.region_of(addr << 6)


def _unserved(tag: int, read: bool, error: DcohError) -> Answer:
    """Refused, NXM or illegal: reads get MemData-NXM (no NDR), everything else a plain Cmp."""
    if read:
        return Answer(drs=_NXM, error=error, tag=tag)
    return Answer(ndr=NDROpcode.CMP, error=error, tag=tag)


def expected_req(cfg: DeviceConfig, hdr) -> Answer:
    """The DCOH's answer to one M2S Req; ``hdr`` maps M2S_REQ_FIELDS names to ints.

    Fields used: ``opcode``, ``snp_type``, ``meta_field``, ``meta_value``, ``addr`` and ``tag``
    (default 0); others are ignored. Values must fit their field widths (else ValueError).

    Order of decisions (docs/coherence.md leaves the precedence open; this is the reference):
    1. MemSpecRd (any SnpType/meta, any address, even outside HDM) is dropped: no response,
       no media access, no error.
    2. A combination outside the legal table is ``ILLEGAL_REQ`` whatever the address: MemRd and
       MemRdData get DRS MemData-NXM, every other opcode (undefined encodings included) Cmp.
    3. Outside HDM (no region, or address bits above ``addr_bits``) is ``NXM``.
    4. table/staging: the table row. superblock/slots: MemRd(SnpCur, MetaField No-Op) is served
       (MemData + Cmp, not tracked); every other legal combination is ``REFUSED``. log:
       ``REFUSED``. NXM/REFUSED are answered like illegal ones (point 2).
    """
    op, snp, mf, mv, tag, addr = _fields(hdr, _REQ_WIDTHS, "Req")
    if op == ReqOpcode.MEM_SPEC_RD:
        return Answer(tag=tag)
    row = _lookup(_REQ_TABLE, (op, snp, mf, mv))
    read = op in _READ_OPS
    if row is None:
        return _unserved(tag, read, DcohError.ILLEGAL_REQ)
    region = host_region(cfg, addr)
    if region is None:
        return _unserved(tag, read, DcohError.NXM)
    if region in HOST_RW_REGIONS:
        return replace(row, tag=tag)
    if region in HOST_RO_REGIONS and op == ReqOpcode.MEM_RD and snp == SnpType.SNP_CUR:
        return replace(row, tag=tag)     # the table only has MemRd SnpCur with MetaField No-Op
    return _unserved(tag, read, DcohError.REFUSED)


def expected_rwd(cfg: DeviceConfig, hdr, sf: str | None = None) -> Answer:
    """The DCOH's answer to one M2S RwD; ``hdr`` maps M2S_RWD_FIELDS names to ints.

    ``sf`` is the snoop-filter state of the line when the write is served ("I", "S", "A") if
    the caller knows it; it matters only for MemWr/MemWrPtl with Meta0 A or S, which need the
    line tracked (SF S or A): with ``sf="I"`` the answer is ``SF_MISS_OWNED``, the write is
    still done and the SF and the host's grant stay unchanged (the RwD channel never waits for
    a victim snoop, so the DCOH cannot allocate an entry here). ``sf=None`` assumes tracked.

    Order of decisions:
    1. BIConflict (any SnpType/meta, any address) gets BI-ConflictAck with the same tag, no
       error, no media access, SF unchanged.
    2. A combination outside the legal table is ``ILLEGAL_RWD``: Cmp, nothing written.
    3. Outside HDM is ``NXM``; superblock, slots and log are ``REFUSED``: Cmp, nothing written.
    4. table/staging: the table row; the Cmp leaves after the media write is persistent (B).

    Poison is media state, not in ``Answer``: a MemWr/MemWrPtl that this function answers with
    ``media_write`` goes to the media with its ``poison`` bit, whatever it is (no error, never
    dropped). The media keeps one poison bit per line: a poisoned write sets it, a
    non-poisoned write of all 64 bytes (MemWr, MemWrPtl with ``be`` all ones, a device write
    with all byte enables) clears it, a partial non-poisoned write leaves it; host reads of a
    poisoned line get MemData with poison 1, device reads ``err`` 1 (:func:`media_poison_after`
    is the rule; docs/coherence.md, "Poison").
    """
    if sf not in (None, "I", "S", "A"):
        raise ValueError(f"sf must be None, 'I', 'S' or 'A', got {sf!r}")
    if "poison" in hdr and hdr["poison"] not in (0, 1):
        raise ValueError(f"RwD.poison={hdr['poison']!r} does not fit in 1 unsigned bit")
    op, snp, mf, mv, tag, addr = _fields(hdr, _RWD_WIDTHS, "RwD")
    if op == RwDOpcode.BI_CONFLICT:
        return Answer(ndr=NDROpcode.BI_CONFLICT_ACK, tag=tag)
    row = None
    if op in _WRITE_OPS and snp == SnpType.NO_OP:
        row = _lookup(_WR_TABLE, (mf, mv))
    if row is None:
        return _unserved(tag, False, DcohError.ILLEGAL_RWD)
    region = host_region(cfg, addr)
    if region is None:
        return _unserved(tag, False, DcohError.NXM)
    if region not in HOST_RW_REGIONS:
        return _unserved(tag, False, DcohError.REFUSED)
    if row.sf_after in ("A", "S") and sf == "I":
        return replace(row, sf_after=None, grant=None, error=DcohError.SF_MISS_OWNED, tag=tag)
    return replace(row, tag=tag)


def media_poison_after(poisoned: bool, write_poison: bool, be: int) -> bool:
    """The media's poison bit of a line after a write to it (docs/coherence.md, "Poison"):
    set by a poisoned write (any byte enables, none included), cleared by a non-poisoned
    write of all 64 bytes (``be`` all ones), unchanged by a partial non-poisoned write."""
    if write_poison:
        return True
    return poisoned and be != (1 << LINE_BYTES) - 1


# =============================================================================================
# BISnp / BIRsp
# =============================================================================================

_BIRSP_FOR = {
    BISnpOpcode.BISNP_INV: (BIRspOpcode.BIRSP_I,),
    BISnpOpcode.BISNP_DATA: (BIRspOpcode.BIRSP_I, BIRspOpcode.BIRSP_S),
    BISnpOpcode.BISNP_CUR: (BIRspOpcode.BIRSP_I, BIRspOpcode.BIRSP_S, BIRspOpcode.BIRSP_E),
}
_BIRSP_SF = {
    BIRspOpcode.BIRSP_I: "I", BIRspOpcode.BIRSP_S: "S", BIRspOpcode.BIRSP_E: "A",
    BIRspOpcode.BIRSP_I_BLK: "I", BIRspOpcode.BIRSP_S_BLK: "S", BIRspOpcode.BIRSP_E_BLK: "A",
}
_BIRSP_HOST = {"I": "I", "S": "S", "A": "E"}


def birsp_allowed(bisnp_opcode: int, birsp_opcode: int) -> bool:
    """True iff ``birsp_opcode`` is an allowed answer to ``bisnp_opcode``.

    BISnpInv → BIRspI; BISnpData → BIRspI/S; BISnpCur → BIRspI/S/E. Blk answers and undefined
    encodings are never allowed (``BIRSP_KIND``). The DCOH never sends Blk snoops, so nothing
    answers a BISnp*Blk legally either.
    """
    return birsp_opcode in _BIRSP_FOR.get(bisnp_opcode, ())


def sf_after_birsp(birsp_opcode: int) -> str:
    """Snoop-filter state after a BIRsp with an outstanding tag: I ("I": entry freed), S, or A
    for E. Blk variants set what the host said (I, S, A) and are counted as ``BIRSP_KIND``.

    Undefined encodings raise ValueError: docs/coherence.md does not say what they set.
    """
    try:
        return _BIRSP_SF[birsp_opcode]
    except KeyError:
        raise ValueError(f"BIRsp opcode {birsp_opcode!r} is undefined; docs/coherence.md does "
                         f"not specify its snoop-filter update") from None


# =============================================================================================
# Host permission (rules 1, 2, 3, 5, 7)
# =============================================================================================

_RANK = {"I": 0, "S": 1, "E": 2, "M": 2}
_SF_RANK = {"I": 0, "S": 1, "A": 2}


def _name(enum_cls, v) -> str:
    return enum_cls(v).name if v in enum_cls._value2member_map_ else str(v)


class HostPermission:
    """Per line, the most the host may legitimately hold ("I" < "S" < "E") given the messages
    seen at the device boundary; a scoreboard feeds it every message in time order and asks it.

    Update rules (upgrades when the DCOH's grant is seen, downgrades when the host sends):

    ===================================================  ==========================================
    ``req``: MemInv/MemInvNT/MemClnEvct Meta0=I           I (the host gave the line up)
    ``rwd``: MemWr/MemWrPtl Meta0=I / Meta0=S / Meta0=A   I / at most S / unchanged (no upgrade)
    ``response`` with NDR Cmp-E / Cmp-S                   E / S (exactly; Cmp changes nothing)
    ``birsp`` I / S / E (Blk alike) to an outstanding tag at most I / S / E (a BIRsp never upgrades)
    ===================================================  ==========================================

    Checks (each raises ``CoherenceViolation``, or with ``raise_on_violation=False`` appends it to
    ``violations`` and returns it):

    - rule 1, ``check_host(line, state)``: the host model's real state (I/S/E/M) is at most the
      permission; ``check_sf(line, sf)``: the DCOH's SF state (if probed) covers it (E needs A,
      S needs S or A). Both are sound at any cycle: the SF is set before a grant leaves and
      cleared after the host's downgrade arrives.
    - rule 2/3, ``device_access(line, write, t)``: a device media write needs permission I; a
      device media read needs at most S, or a BISnpCur to the line answered after the last Cmp-E.
      Sound but not complete: a grant counts only once its NDR is seen, so a device access
      between the DCOH serving a Req and the Cmp leaving is caught by ``LineValueChecker``
      (the host then caches a stale value), not here.
    - rule 5 (and 4, "no Cmp-E while a BISnp is pending"), ``response``: a Req accepted at or
      after the cycle a BISnp to its line was sent must not be answered before that BISnp's
      BIRsp is seen. A Req accepted earlier may legally be answered either side of the BISnp
      (the host resolves that race with BIConflict).
    - rule 7, ``bisnp``: a BITag is not reused while outstanding, is below ``cfg.bi_tags``, and
      a line has at most one BISnp outstanding (device requests wait for it, victims are picked
      among lines without one). ``birsp`` returns the ``DcohError`` the DCOH must pulse:
      ``BIRSP_TAG`` (unknown tag, nothing changes), ``BIRSP_KIND`` or ``NONE``.

    Feeding order: in one cycle report M2S messages (host → device) before S2M messages.
    The host is assumed to have at most one Req per line outstanding (docs/coherence.md).
    """

    def __init__(self, cfg: DeviceConfig | None = None, *, raise_on_violation: bool = True):
        self.cfg = cfg
        self.raise_on_violation = raise_on_violation
        self.violations: list[CoherenceViolation] = []
        self._perm: dict[int, str] = {}          # line -> "S" | "E"; absent = "I"
        self._reqs: dict[int, list[int]] = {}     # line -> accept cycles of outstanding Reqs
        self._tags: dict[int, tuple] = {}         # bi_tag -> (line, bisnp opcode, cycle sent)
        self._snooped: dict[int, int] = {}        # line -> bi_tag of its outstanding BISnp
        self._cur_ok: set[int] = set()            # lines BISnpCur-snooped since their last Cmp-E
        self._flagged = None                      # (line, accept cycle) of the last rule-5 Req

    # --- queries --------------------------------------------------------------------------------
    def state(self, line: int) -> str:
        """The most the host may hold: "I", "S" or "E" (E includes M)."""
        return self._perm.get(line, "I")

    def outstanding_bisnp(self, line: int) -> int | None:
        """BITag of the BISnp outstanding to ``line``, or None."""
        return self._snooped.get(line)

    def _fail(self, rule, line, msg, who=None, times=None):
        v = CoherenceViolation(rule, line, msg, who=who, times=times)
        if self.raise_on_violation:
            raise v
        self.violations.append(v)
        return v

    def _set(self, line, st):
        if st == "I":
            self._perm.pop(line, None)
        else:
            self._perm[line] = st

    def _cap(self, line, st):
        if _RANK[st] < _RANK[self.state(line)]:
            self._set(line, st)

    # --- host -> device -------------------------------------------------------------------------
    def req(self, line: int, opcode: int, snp_type: int, meta_field: int, meta_value: int,
            t: int) -> None:
        """An M2S Req to ``line`` accepted at cycle ``t``."""
        if (opcode in (ReqOpcode.MEM_INV, ReqOpcode.MEM_INV_NT, ReqOpcode.MEM_CLN_EVCT)
                and meta_field == MetaField.META0_STATE and meta_value == MetaValue.I):
            self._set(line, "I")
        if opcode != ReqOpcode.MEM_SPEC_RD:
            self._reqs.setdefault(line, []).append(t)

    def rwd(self, line: int, opcode: int, meta_field: int, meta_value: int, t: int) -> None:
        """An M2S RwD to ``line`` accepted at cycle ``t`` (BIConflict changes nothing)."""
        if opcode in _WRITE_OPS and meta_field == MetaField.META0_STATE:
            if meta_value == MetaValue.I:
                self._set(line, "I")
            elif meta_value == MetaValue.S:
                self._cap(line, "S")

    def birsp(self, bi_tag: int, opcode: int, t: int) -> DcohError:
        """An M2S BIRsp accepted at cycle ``t``; returns the error the DCOH must report."""
        ent = self._tags.pop(bi_tag, None)
        if ent is None:
            return DcohError.BIRSP_TAG
        line, snp, _ = ent
        del self._snooped[line]
        sf = _BIRSP_SF.get(opcode)
        if sf is not None:
            self._cap(line, _BIRSP_HOST[sf])
        if snp in (BISnpOpcode.BISNP_CUR, BISnpOpcode.BISNP_CUR_BLK):
            self._cur_ok.add(line)
        return DcohError.NONE if birsp_allowed(snp, opcode) else DcohError.BIRSP_KIND

    # --- device -> host -------------------------------------------------------------------------
    def response(self, line: int, t: int, ndr: int | None = None, last: bool = True):
        """An S2M DRS or NDR answering the oldest outstanding Req to ``line``, seen at cycle
        ``t``. ``ndr`` is the NDR opcode (None for a DRS); ``last`` marks the Req's final
        response (a served MemRd has two: MemData and Cmp*). Do not call it for RwD answers."""
        reqs = self._reqs.get(line)
        t_req = reqs[0] if reqs else None
        tag = self._snooped.get(line)
        if tag is not None and t_req is not None:
            _, snp, t_snp = self._tags[tag]
            if t_snp <= t_req and self._flagged != (line, t_req):   # once per Req
                self._flagged = (line, t_req)
                what = "DRS" if ndr is None else "NDR " + _name(NDROpcode, ndr)
                self._fail("rule 5", line,
                           f"Req accepted at {t_req} answered ({what}) at {t} while "
                           f"{_name(BISnpOpcode, snp)} (bi_tag {tag}) sent at {t_snp} is still "
                           f"outstanding", who="dcoh", times=(t_snp, t_req, t))
        if ndr == NDROpcode.CMP_E:
            self._set(line, "E")
            self._cur_ok.discard(line)
        elif ndr == NDROpcode.CMP_S:
            self._set(line, "S")
        if last and reqs:
            reqs.pop(0)
            if not reqs:
                del self._reqs[line]

    def bisnp(self, line: int, opcode: int, bi_tag: int, t: int):
        """An S2M BISnp to ``line`` sent at cycle ``t``."""
        if self.cfg is not None and not 0 <= bi_tag < self.cfg.bi_tags:
            return self._fail("rule 7", line, f"bi_tag {bi_tag} outside 0..{self.cfg.bi_tags - 1}",
                              who="dcoh", times=(t,))
        if bi_tag in self._tags:
            other, _, t0 = self._tags[bi_tag]
            return self._fail("rule 7", line, f"bi_tag {bi_tag} reused while its BISnp to line "
                              f"{other:#x} sent at {t0} is outstanding", who="dcoh", times=(t0, t))
        if line in self._snooped:
            t0 = self._tags[self._snooped[line]][2]
            return self._fail("rule 7", line, f"second BISnp while bi_tag {self._snooped[line]} "
                              f"(sent at {t0}) is outstanding", who="dcoh", times=(t0, t))
        self._tags[bi_tag] = (line, opcode, t)
        self._snooped[line] = bi_tag
        return None

    # --- checks ---------------------------------------------------------------------------------
    def device_access(self, line: int, write: bool, t: int, who: str = "device"):
        """A device (engine) read or write of ``line`` issued on the media port at cycle ``t``."""
        p = self.state(line)
        if write and p != "I":
            return self._fail("rule 2", line, f"device write while the host may hold {p}",
                              who=who, times=(t,))
        if not write and p == "E" and line not in self._cur_ok:
            return self._fail("rule 3", line, "device read while the host may hold E/M and no "
                              "BISnpCur completed since the grant", who=who, times=(t,))
        return None

    def check_host(self, line: int, state: str, t: int | None = None):
        """The host model holds ``line`` in ``state`` (I/S/E/M): it must have been granted."""
        p = self.state(line)
        if _RANK[state] > _RANK[p]:
            return self._fail("rule 1", line, f"host holds {state} but was only allowed {p}",
                              who="host", times=None if t is None else (t,))
        return None

    def check_sf(self, line: int, sf: str, t: int | None = None):
        """The DCOH's snoop filter says ``sf`` (I/S/A) for ``line``: it must cover the host."""
        p = self.state(line)
        if _SF_RANK[sf] < _RANK[p]:
            return self._fail("rule 1", line, f"snoop filter says {sf} but the host may hold {p}",
                              who="dcoh", times=None if t is None else (t,))
        return None


# =============================================================================================
# Data values
# =============================================================================================

_FULL = (1 << (8 * LINE_BYTES)) - 1
_ALL_BE = (1 << LINE_BYTES) - 1
_LO7 = int.from_bytes(b"\x7f" * LINE_BYTES, "little")
_HI1 = int.from_bytes(b"\x80" * LINE_BYTES, "little")
_SPREAD8 = [int.from_bytes(bytes(0xFF if (b >> i) & 1 else 0 for i in range(8)), "little")
            for b in range(256)]
_INF = 1 << 62          # end time of a write still in flight
_we = attrgetter("we")


def _byte_mask(be: int) -> int:
    """64-bit byte enables -> 512-bit mask with 0xFF in every enabled byte."""
    if be == _ALL_BE:
        return _FULL
    m, sh = 0, 0
    while be:
        m |= _SPREAD8[be & 0xFF] << sh
        be >>= 8
        sh += 64
    return m


def _zero_bytes(x: int) -> int:
    """512-bit mask with 0xFF in every byte of ``x`` that is zero (exact, no borrow)."""
    y = ((x & _LO7) + _LO7) | x
    return ((~y & _HI1) >> 7) * 0xFF


def _hexrow(chunk) -> str:
    return " ".join(f"{b:02x}" for b in chunk)


class _Write:
    __slots__ = ("ws", "we", "val", "mask", "be", "who", "poison")

    def __init__(self, ws, we, val, mask, be, who, poison):
        self.ws, self.we, self.val, self.mask = ws, we, val, mask
        self.be, self.who, self.poison = be, who, poison

    def source(self) -> str:
        end = "in flight" if self.we >= _INF else str(self.we)
        return f"write by {self.who} [{self.ws}, {end}]" + (" poisoned" if self.poison else "")


class _Line:
    __slots__ = ("init", "writes", "covered", "max_re", "max_rs", "pruned_at", "prune_len",
                 "ever_poisoned", "poison_unknown")

    def __init__(self, init: int, prune_len: int):
        self.init = init
        self.ever_poisoned = False       # a poisoned write was reported
        self.poison_unknown = False      # a write deciding the poison bit was pruned
        self.writes: list[_Write] = []   # sorted by end time (in-flight writes last)
        self.covered = 0                 # bytes written by pruned writes (all ended before horizon)
        self.max_re = -_INF              # latest end of a read already checked
        self.max_rs = -_INF              # latest start of a read already checked
        self.pruned_at = -_INF           # horizon of the last pruning
        self.prune_len = prune_len       # prune again only when holding more writes than this


class LineValueChecker:
    """Checks "every read of a line returns the last value written to it by anyone" per byte,
    where concurrency is given by time intervals (integer cycles, both ends inclusive).

    A write ``[ws, we]`` takes effect at some instant of its interval: a host MemWr from accept
    to its Cmp, a device write from request to B, a host CPU store into its own cache at one
    cycle (``ws == we``). A read ``[rs, re]`` samples at some instant of its interval. A read
    byte is explained iff it equals

    (a) the byte of a write to it whose interval overlaps ``[rs, re]``, or
    (b) the byte of a write that ended before ``rs`` and is not superseded, i.e. no other write
        to that byte started after it ended and ended before ``rs``, or
    (c) the initial value, if no write to that byte ended before ``rs``.

    That is exactly "some linearization of the writes and this one read, consistent with real
    time, puts this value last" (checked per read and per byte, not across reads).

    Reporting contract (when it is safe to report):

    - Writes: report each write once, either as ``write(...)`` once its end is known, or as
      ``write_begin(...)`` when it starts (its data is known then) and ``write_end(handle, t)``
      when it completes. Writes may be reported in any order among themselves.
    - Reads are checked when ``read(...)`` is called, so call it only after every write to the
      line with ``t_start <= re`` has been reported (complete or begun), and every begun write
      that ended before ``rs`` has had its ``write_end``. With ``write_begin`` at the cycle a
      write is seen, ``write_end`` at the cycle it completes and ``read`` at (or after) the
      cycle the read's data returns, this holds by construction. Breaking it raises ValueError
      when detected: a write starting before the end of an already checked read of the same
      line (it could have explained that read; starting exactly at that end is tolerated and
      ignored for that read), or a ``write_end`` before the start of an already checked read
      (that read was judged as if the write might still be in flight, which is permissive).
    - Horizon: ``advance(h)`` promises that every read reported later has ``t_start >= h`` (a
      scoreboard passes the start of its oldest read still in flight, or now); history that no
      such read can see is pruned. With ``max_age`` set, the horizon also follows automatically
      as (latest cycle reported) - ``max_age``, where the cycles counted are a read's end, a
      ``write``'s or ``write_begin``'s start and a ``write_end``'s end. A read starting before
      the horizon raises ValueError. Without a horizon nothing is pruned (memory grows with
      the writes).

    What is a write: every new value, once, where it is created. With a host model that
    reports its CPU stores (point intervals) and cache loads, a write-back of dirty data
    (MemWr Meta0 I/S/A) carries an old value and must not be reported again (as a write from
    accept to Cmp it would look concurrent with the writes that follow it and hide a lost
    update); an
    uncached host MemWr, a device write and a store are new values. Host reads that fill the
    cache are reads from accept to their MemData, device reads from request to response.

    Poison is not a value: ``read(..., poison=True)`` is counted in ``stats["poisoned_reads"]``
    and its data not checked; ``write(..., poison=True)`` is recorded like any write (its data
    is what the media holds), labelled. The poison bit of every read is checked against the
    media rule (:func:`media_poison_after`; lines start unpoisoned): a read may return poison
    1 (0) only if a poisoned write (a non-poisoned full-line write, or the initial state) is a
    candidate for the last write deciding the bit, by the same interval rule as a byte's value
    (``CoherenceViolation`` kind "poison"). Partial non-poisoned writes decide nothing. On a
    line that never had a poisoned write the bit must be 0; once a deciding write of a line
    that had one is pruned, that line's bit is no longer checked. A write the DCOH does not make (refused, NXM, illegal) must
    not be reported.

    ``read`` returns None when explained; otherwise it raises ``CoherenceViolation`` (or, with
    ``raise_on_violation=False``, returns it and appends it to ``violations``). The message has
    the line address, who, the interval, a hexdump of the data with unexplained bytes marked
    and the allowed candidates (value and source) of each unexplained byte.

    Speed (bytes compared as 512-bit integers, superseded history skipped newest first and
    pruned at the horizon): 3-5 µs per write and 3.5-6 µs per read, depending on machine
    load (checker calls only; Python 3.11 on the 2-core development machine), for 200,000
    mixed operations over 300 Zipf-hot lines, 45 % writes (40 % partial, 10 % point stores, up
    to 40 cycles long), reads up to 300 cycles long, ``max_age=300``; so a 1,000,000-message
    stress run spends 3-6 s here (printed by ``test_200k_mixed_operations_keep_history_bounded``,
    which checks that the kept history stays bounded).
    """

    def __init__(self, initial=None, *, max_age: int | None = None,
                 raise_on_violation: bool = True):
        if max_age is not None and max_age < 0:
            raise ValueError(f"max_age must be >= 0, got {max_age}")
        self._initial = initial
        self.max_age = max_age
        self.raise_on_violation = raise_on_violation
        self.horizon = -_INF
        self.violations: list[CoherenceViolation] = []
        self.stats = {"reads": 0, "writes": 0, "poisoned_reads": 0, "poisoned_writes": 0,
                      "violations": 0, "pruned": 0}
        self._lines: dict[int, _Line] = {}
        self._open: dict[int, tuple] = {}     # handle -> (_Line, _Write) of writes in flight
        self._next_handle = 0
        self._latest = -_INF

    # a line's history is pruned only when it holds more than this many writes, and more than
    # twice as many as after its last pruning (amortizes pruning)
    prune_threshold = 8

    # --- helpers --------------------------------------------------------------------------------
    def _line(self, line: int) -> _Line:
        L = self._lines.get(line)
        if L is None:
            init = bytes(LINE_BYTES) if self._initial is None else bytes(self._initial(line))
            if len(init) != LINE_BYTES:
                raise ValueError(f"initial({line:#x}) returned {len(init)} bytes, expected 64")
            L = self._lines[line] = _Line(int.from_bytes(init, "little"), self.prune_threshold)
        return L

    def _seen(self, t: int):
        if t > self._latest:
            self._latest = t
            if self.max_age is not None and t - self.max_age > self.horizon:
                self.horizon = t - self.max_age

    @staticmethod
    def _data(data, what: str) -> bytes:
        if not isinstance(data, bytes):
            data = bytes(data)
        if len(data) != LINE_BYTES:
            raise ValueError(f"{what}: data must be {LINE_BYTES} bytes, got {len(data)}")
        return data

    def _new_write(self, line, data, be, t_start, t_end, who, poison) -> tuple:
        data = self._data(data, "write")
        if not (isinstance(be, int) and 0 <= be <= _ALL_BE):
            raise ValueError(f"write: be must be a 64-bit mask, got {be!r}")
        if t_end < t_start:
            raise ValueError(f"write: t_end {t_end} < t_start {t_start}")
        L = self._line(line)
        if t_start < L.max_re:
            raise ValueError(
                f"write to line {line:#x} by {who} starting at {t_start} reported after a read "
                f"ending at {L.max_re} was checked; report writes (or write_begin) before the "
                f"reads they may explain")
        self.stats["writes"] += 1
        self.stats["poisoned_writes"] += bool(poison)
        L.ever_poisoned |= bool(poison)
        w = _Write(t_start, t_end, int.from_bytes(data, "little"), _byte_mask(be), be, who,
                   bool(poison))
        insort(L.writes, w, key=_we)
        return L, w

    def _prune(self, L: _Line):
        """Drop writes that ended before the horizon and are superseded in every byte by
        writes that also ended before it: no read starting at or after the horizon sees them
        (a superseded write's own superseders stay, so supersession is never lost)."""
        h = self.horizon
        ws = L.writes
        n = bisect_left(ws, h, key=_we)
        L.pruned_at = h
        if n < 2:
            return
        L.prune_len = max(self.prune_threshold, 2 * (len(ws) - n))
        sup, pending, keep, covered = 0, [], [], L.covered
        for i in range(n - 1, -1, -1):
            w = ws[i]
            if pending:
                rest = []
                for u in pending:
                    if u.ws > w.we:
                        sup |= u.mask
                    else:
                        rest.append(u)
                pending = rest
                if sup == _FULL:
                    for u in ws[:i + 1]:
                        covered |= u.mask
                    break
            if w.mask & ~sup:
                keep.append(w)
            else:
                covered |= w.mask
            pending.append(w)
        keep.reverse()
        if L.ever_poisoned and not L.poison_unknown:
            kept = {id(w) for w in keep}
            L.poison_unknown = any(id(w) not in kept and (w.poison or w.be == _ALL_BE)
                                   for w in ws[:n])
        self.stats["pruned"] += n - len(keep)
        L.covered = covered
        L.writes = keep + ws[n:]
        # hysteresis: a line whose kept history is long is not re-pruned on every write
        L.prune_len = max(self.prune_threshold, 2 * len(L.writes))

    def _explained(self, L: _Line, v: int, rs: int, re: int) -> int:
        """Mask of the bytes of read value ``v`` over ``[rs, re]`` that are explained."""
        ws = L.writes
        n = bisect_left(ws, rs, key=_we)        # ws[:n] ended before rs
        ok = 0
        for i in range(n, len(ws)):             # (a) overlapping writes
            w = ws[i]
            if w.ws <= re:
                ok |= w.mask & _zero_bytes(v ^ w.val)
        if ok == _FULL:
            return ok
        # (b) ended before rs, newest end first; ``sup`` = bytes written by writes that started
        # after the current one ended (so they supersede it), ``pending`` = those not yet so
        sup, pending, cov = 0, [], L.covered
        for i in range(n - 1, -1, -1):
            w = ws[i]
            if pending:
                rest = []
                for u in pending:
                    if u.ws > w.we:
                        sup |= u.mask
                    else:
                        rest.append(u)
                pending = rest
                if sup == _FULL:        # every older write is superseded, initial is out
                    return ok
            c = w.mask & ~sup
            if c:
                ok |= c & _zero_bytes(v ^ w.val)
                if ok == _FULL:
                    return ok
            cov |= w.mask
            pending.append(w)
        init_ok = _FULL & ~cov                  # (c) no write ended before rs
        if init_ok:
            ok |= init_ok & _zero_bytes(v ^ L.init)
        return ok

    # --- writes ---------------------------------------------------------------------------------
    def write(self, line: int, data, be: int, t_start: int, t_end: int, who: str = "?",
              poison: bool = False) -> None:
        """A completed write of the bytes of ``data`` (64) whose ``be`` bit is set, in effect
        somewhere in ``[t_start, t_end]``."""
        L, _ = self._new_write(line, data, be, t_start, t_end, who, poison)
        self._seen(t_start)     # t_end may lie ahead when a write is reported early
        if len(L.writes) > L.prune_len and L.pruned_at < self.horizon:
            self._prune(L)

    def write_begin(self, line: int, data, be: int, t_start: int, who: str = "?",
                    poison: bool = False) -> int:
        """A write that started at ``t_start`` and has not completed; returns its handle for
        ``write_end``. Until then it explains any read that ends at or after ``t_start``."""
        _, w = self._new_write(line, data, be, t_start, _INF, who, poison)
        self._seen(t_start)
        h = self._next_handle
        self._next_handle += 1
        self._open[h] = (self._lines[line], w)
        return h

    def write_end(self, handle: int, t_end: int) -> None:
        """The write ``handle`` (from ``write_begin``) completed at ``t_end``."""
        try:
            L, w = self._open.pop(handle)
        except KeyError:
            raise ValueError(f"write_end: unknown or already ended handle {handle!r}") from None
        if t_end < w.ws:
            raise ValueError(f"write_end: t_end {t_end} < t_start {w.ws}")
        if t_end < L.max_rs:
            raise ValueError(
                f"write_end of the write by {w.who} at {t_end} reported after a read starting at "
                f"{L.max_rs} was checked; end writes before reporting reads that start later")
        L.writes.remove(w)
        w.we = t_end
        insort(L.writes, w, key=_we)
        self._seen(t_end)

    # --- reads ----------------------------------------------------------------------------------
    def read(self, line: int, data, t_start: int, t_end: int, who: str = "?",
             poison: bool = False):
        """Check a read of ``line`` that returned ``data`` (64 bytes), sampled somewhere in
        ``[t_start, t_end]``. Returns None if explained, else raises (or returns) ``CoherenceViolation``."""
        if t_end < t_start:
            raise ValueError(f"read: t_end {t_end} < t_start {t_start}")
        if t_start < self.horizon:
            raise ValueError(f"read of line {line:#x} by {who} starting at {t_start} reported "
                             f"after the horizon moved to {self.horizon}")
        L = self._line(line)
        possible = self._poison_possible(L, t_start, t_end)
        if bool(poison) not in possible:
            self.stats["violations"] += 1
            self._seen(t_end)
            v = CoherenceViolation("poison", line, (
                f"read [{t_start}, {t_end}] returned poison {int(bool(poison))}; deciding "
                f"writes: {[w.source() for w in self._deciding(L)] or 'none'} (lines start "
                f"unpoisoned)"), who=who, times=(t_start, t_end))
            if self.raise_on_violation:
                raise v
            self.violations.append(v)
            return v
        if poison:
            self.stats["poisoned_reads"] += 1
            self._seen(t_end)
            return None
        data = self._data(data, "read")
        if L.pruned_at < self.horizon and len(L.writes) > L.prune_len:
            self._prune(L)
        self.stats["reads"] += 1
        if t_end > L.max_re:
            L.max_re = t_end
        if t_start > L.max_rs:
            L.max_rs = t_start
        ok = self._explained(L, int.from_bytes(data, "little"), t_start, t_end)
        self._seen(t_end)           # only now: an automatic horizon must not prune this read
        if ok == _FULL:
            return None
        self.stats["violations"] += 1
        v = CoherenceViolation("value", line, self._describe(line, data, t_start, t_end, ok), who=who,
                      times=(t_start, t_end))
        if self.raise_on_violation:
            raise v
        self.violations.append(v)
        return v

    @staticmethod
    def _deciding(L: _Line) -> list:
        """The writes of ``L`` that decide its poison bit: poisoned, or of all 64 bytes."""
        return [w for w in L.writes if w.poison or w.be == _ALL_BE]

    def _poison_possible(self, L: _Line, rs: int, re: int) -> set:
        """The poison bits a read of ``L`` over ``[rs, re]`` may return."""
        if not L.ever_poisoned:
            return {False}
        if L.poison_unknown:
            return {False, True}
        deciding = self._deciding(L)
        done = [w for w in deciding if w.we < rs]
        out = {w.poison for w in deciding
               if w.ws <= re and w.we >= rs or
               w.we < rs and not any(u.ws > w.we for u in done)}
        if not done:
            out.add(False)
        return out

    def advance(self, horizon: int) -> None:
        """Promise that every read reported from now on starts at or after ``horizon``."""
        if horizon > self.horizon:
            self.horizon = horizon

    flush = advance

    # --- inspection -----------------------------------------------------------------------------
    def candidates(self, line: int, t_start: int, t_end: int) -> list[dict[int, list[str]]]:
        """Per byte of ``line``, the values a read over ``[t_start, t_end]`` may return, each
        with its sources ("write by who [ws, we]" or "initial"). Computed byte by byte from the
        definition (slow; for diagnostics and tests)."""
        L = self._line(line)
        rs, re = t_start, t_end
        init = L.init.to_bytes(LINE_BYTES, "little")
        out = []
        for b in range(LINE_BYTES):
            ws = [w for w in L.writes if (w.be >> b) & 1]
            done = [w for w in ws if w.we < rs]
            cand: dict[int, list[str]] = {}
            for w in ws:
                if w.ws <= re and w.we >= rs or \
                        w.we < rs and not any(u.ws > w.we for u in done):
                    cand.setdefault((w.val >> (8 * b)) & 0xFF, []).append(w.source())
            if not done and not (L.covered >> (8 * b)) & 0xFF:
                cand.setdefault(init[b], []).append("initial")
            out.append(cand)
        return out

    def _describe(self, line: int, data: bytes, rs: int, re: int, ok: int) -> str:
        bad = [b for b in range(LINE_BYTES) if not (ok >> (8 * b)) & 0xFF]
        cands = self.candidates(line, rs, re)
        out = [f"read [{rs}, {re}] returned {len(bad)} unexplained byte(s)"]
        for o in range(0, LINE_BYTES, 16):
            if not any(o <= b < o + 16 for b in bad):
                continue
            out.append(f"  got  +{o:02x}: {_hexrow(data[o:o + 16])}")
            exp = []
            for b in range(o, o + 16):
                vals = cands[b]
                exp.append(".." if b not in bad else
                           (f"{next(iter(vals)):02x}" if len(vals) == 1 else "??"))
            out.append(f"  want +{o:02x}: {' '.join(exp)}")
            out.append("             " + " ".join("^^" if b in bad else "  "
                                                  for b in range(o, o + 16)).rstrip())
        for b in bad[:16]:
            alts = "; ".join(f"{val:#04x} ({', '.join(src)})"
                             for val, src in sorted(cands[b].items()))
            out.append(f"  byte +{b:02x}: got {data[b]:#04x}, allowed {alts or 'nothing'}")
        if len(bad) > 16:
            out.append(f"  ... and {len(bad) - 16} more byte(s)")
        return "\n".join(out)
