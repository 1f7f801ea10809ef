"""Coherence reference (sw_model/coherence.py) implements docs/coherence.md: request answers per
table row and region, BIRsp rules, host-permission checks and the line-value checker."""
import heapq
import itertools
import pathlib
import random
import subprocess
import sys
import time

import pytest

from hw.config import DeviceConfig
from hw.cxl_encodings import (BIRspOpcode as BR, BISnpOpcode as BS, DcohError as E,
                              DRSOpcode as DRS, MetaField as MF, MetaValue as MV, NDROpcode as NDR,
                              ReqOpcode as RQ, RwDOpcode as WD, SnpType as ST)
from sw_model.coherence import (NXM_DATA, Answer, HostPermission, LineValueChecker, CoherenceViolation,
                                birsp_allowed, expected_req, expected_rwd, host_region,
                                media_poison_after, sf_after_birsp)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CFG = DeviceConfig()
ALL = (1 << 64) - 1


def line_of(byte_addr):
    return byte_addr >> 6


# One line address per kind of place in the memory map (first and last line of each region)
PLACES = {
    "table": [line_of(CFG.table_base), line_of(CFG.table_base + CFG.table_size - 64)],
    "staging": [line_of(CFG.staging_base), line_of(CFG.staging_base + CFG.staging_size - 64)],
    "log": [line_of(CFG.log_base), line_of(CFG.log_base + CFG.log_size - 64)],
    "superblock": [line_of(CFG.superblock_base),
                   line_of(CFG.superblock_base + CFG.superblock_size - 64)],
    "slots": [line_of(CFG.slots_base), line_of(CFG.slots_base + CFG.slots_size - 64)],
    "gap": [line_of(CFG.superblock_base + CFG.superblock_size),
            line_of(CFG.staging_base + CFG.staging_size)],
    "above_addr_bits": [1 << (CFG.addr_bits - 6), (1 << 46) - 1,
                        (1 << (CFG.addr_bits - 6)) | line_of(CFG.table_base)],
}
REGION_OF_PLACE = {"table": "table", "staging": "staging", "log": "log",
                   "superblock": "superblock", "slots": "slots", "gap": None,
                   "above_addr_bits": None}


def req(op, snp, mf, mv, addr=PLACES["table"][0], tag=0x1234):
    return dict(opcode=op, snp_type=snp, meta_field=mf, meta_value=mv, tag=tag, addr=addr,
                ld_id=0, ckid=0, rsvd=0, tc=0)


def rwd(op, snp, mf, mv, addr=PLACES["table"][0], tag=0x4321, poison=0):
    return dict(req(op, snp, mf, mv, addr, tag), poison=poison, trp=0)


# --- the legal tables of docs/coherence.md, transcribed literally (None = any) ----------------
# (name, opcode, snp, meta_field, meta_value) -> (drs, ndr, sf_after, grant, media_read)
REQ_ROWS = [
    ("MemRd SnpInv Meta0/A", RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A,
     (DRS.MEM_DATA, NDR.CMP_E, "A", "E", True)),
    ("MemRd SnpData Meta0/S", RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S,
     (DRS.MEM_DATA, NDR.CMP_S, "S", "S", True)),
    ("MemRd SnpCur NoOp/any", RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, None,
     (DRS.MEM_DATA, NDR.CMP, None, None, True)),
    ("MemRdData SnpData any", RQ.MEM_RD_DATA, ST.SNP_DATA, None, None,
     (DRS.MEM_DATA, NDR.CMP_E, "A", "E", True)),
    ("MemInv SnpInv Meta0/A", RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A,
     (None, NDR.CMP_E, "A", "E", False)),
    ("MemInvNT SnpInv Meta0/A", RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.A,
     (None, NDR.CMP_E, "A", "E", False)),
    ("MemInv SnpInv Meta0/I", RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.I,
     (None, NDR.CMP, "I", "I", False)),
    ("MemInvNT SnpInv Meta0/I", RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.I,
     (None, NDR.CMP, "I", "I", False)),
    ("MemClnEvct NoOp Meta0/I", RQ.MEM_CLN_EVCT, ST.NO_OP, MF.META0_STATE, MV.I,
     (None, NDR.CMP, "I", "I", False)),
    ("MemSpecRd any any", RQ.MEM_SPEC_RD, None, None, None, (None, None, None, None, False)),
]
# (name, opcode, snp, meta_field, meta_value) -> (ndr, sf_after, grant, media_write)
RWD_ROWS = [
    (f"{n} NoOp Meta0/I", op, ST.NO_OP, MF.META0_STATE, MV.I, (NDR.CMP, "I", "I", True))
    for n, op in (("MemWr", WD.MEM_WR), ("MemWrPtl", WD.MEM_WR_PTL))] + [
    (f"{n} NoOp Meta0/A", op, ST.NO_OP, MF.META0_STATE, MV.A, (NDR.CMP, "A", "E", True))
    for n, op in (("MemWr", WD.MEM_WR), ("MemWrPtl", WD.MEM_WR_PTL))] + [
    (f"{n} NoOp Meta0/S", op, ST.NO_OP, MF.META0_STATE, MV.S, (NDR.CMP, "S", "S", True))
    for n, op in (("MemWr", WD.MEM_WR), ("MemWrPtl", WD.MEM_WR_PTL))] + [
    (f"{n} NoOp NoOp/any", op, ST.NO_OP, MF.NO_OP, None, (NDR.CMP, None, None, True))
    for n, op in (("MemWr", WD.MEM_WR), ("MemWrPtl", WD.MEM_WR_PTL))] + [
    ("BIConflict any any", WD.BI_CONFLICT, None, None, None,
     (NDR.BI_CONFLICT_ACK, None, None, False)),
]


def expand(snp, mf, mv):
    return itertools.product(range(8) if snp is None else [snp], range(4) if mf is None else [mf],
                             range(4) if mv is None else [mv])


def doc_row(rows, op, snp, mf, mv):
    hits = [r for r in rows if r[1] == op and (snp, mf, mv) in set(expand(*r[2:5]))]
    assert len(hits) <= 1, f"table rows overlap: {hits}"
    return hits[0] if hits else None


# =============================================================================================
# Requests
# =============================================================================================

@pytest.mark.parametrize("row", REQ_ROWS, ids=[r[0] for r in REQ_ROWS])
@pytest.mark.parametrize("place", ["table", "staging"])
def test_legal_req_row_answered_as_documented_in_coherent_regions(row, place):
    """Every legal Req row, every encoding its "any" columns cover, both ends of the region."""
    _, op, snp, mf, mv, (drs, ndr, sf, grant, rd) = row
    for s, f, v in expand(snp, mf, mv):
        for addr in PLACES[place]:
            a = expected_req(CFG, req(op, s, f, v, addr, tag=0xBEEF))
            assert a == Answer(drs=drs, ndr=ndr, sf_after=sf, grant=grant, media_read=rd,
                               tag=0xBEEF), (s, f, v, hex(addr))


@pytest.mark.parametrize("row", RWD_ROWS, ids=[r[0] for r in RWD_ROWS])
@pytest.mark.parametrize("place", ["table", "staging"])
def test_legal_rwd_row_answered_as_documented_in_coherent_regions(row, place):
    """Every legal RwD row (poisoned or not; SF tracked), both ends of the region."""
    _, op, snp, mf, mv, (ndr, sf, grant, wr) = row
    for s, f, v in expand(snp, mf, mv):
        for addr in PLACES[place]:
            for poison in (0, 1):
                a = expected_rwd(CFG, rwd(op, s, f, v, addr, tag=77, poison=poison))
                assert a == Answer(ndr=ndr, sf_after=sf, grant=grant, media_write=wr, tag=77)


# (place, opcode, snp, meta_field, meta_value, expected error, served?)  one line per case
REGION_REQ_CASES = [
    ("table", RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, E.NONE, True),
    ("staging", RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, E.NONE, True),
    ("superblock", RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, E.NONE, True),
    ("slots", RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.S, E.NONE, True),
    ("superblock", RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, E.REFUSED, False),
    ("slots", RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, E.REFUSED, False),
    ("slots", RQ.MEM_RD_DATA, ST.SNP_DATA, MF.NO_OP, MV.I, E.REFUSED, False),
    ("superblock", RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A, E.REFUSED, False),
    ("slots", RQ.MEM_CLN_EVCT, ST.NO_OP, MF.META0_STATE, MV.I, E.REFUSED, False),
    ("log", RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, E.REFUSED, False),
    ("log", RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, E.REFUSED, False),
    ("log", RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.I, E.REFUSED, False),
    ("gap", RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, E.NXM, False),
    ("gap", RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A, E.NXM, False),
    ("above_addr_bits", RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, E.NXM, False),
    ("above_addr_bits", RQ.MEM_CLN_EVCT, ST.NO_OP, MF.META0_STATE, MV.I, E.NXM, False),
]


@pytest.mark.parametrize("case", REGION_REQ_CASES,
                         ids=[f"{c[0]}-{c[1].name}-{c[2].name}-{c[5].name}"
                              for c in REGION_REQ_CASES])
def test_req_region_rules(case):
    """Region table: coherent regions serve, superblock/slots serve only MemRd(SnpCur, No-Op),
    log refuses, outside HDM (gap, address bits above addr_bits) is NXM; refused/NXM reads get
    MemData-NXM without NDR, other Reqs Cmp, with no SF change, grant or media access."""
    place, op, snp, mf, mv, err, served = case
    for addr in PLACES[place]:
        a = expected_req(CFG, req(op, snp, mf, mv, addr))
        assert a.error == err
        if served:
            assert a.drs == DRS.MEM_DATA and a.ndr is not None and a.media_read
        elif op in (RQ.MEM_RD, RQ.MEM_RD_DATA):
            assert a == Answer(drs=DRS.MEM_DATA_NXM, error=err, tag=0x1234)
        else:
            assert a == Answer(ndr=NDR.CMP, error=err, tag=0x1234)


@pytest.mark.parametrize("place", sorted(PLACES))
def test_memspecrd_dropped_in_every_place_without_error(place):
    """MemSpecRd: no response, no media access, no error, whatever SnpType/meta/address."""
    for addr in PLACES[place]:
        for s, f, v in expand(None, None, None):
            assert expected_req(CFG, req(RQ.MEM_SPEC_RD, s, f, v, addr, tag=9)) == Answer(tag=9)


@pytest.mark.parametrize("place", sorted(PLACES))
def test_rwd_region_rules_writes_only_coherent_regions_biconflict_everywhere(place):
    """MemWr/MemWrPtl write only table/staging (else REFUSED or NXM, Cmp, nothing written);
    BIConflict is acknowledged with its tag in every place."""
    err = {"table": E.NONE, "staging": E.NONE, "gap": E.NXM,
           "above_addr_bits": E.NXM}.get(place, E.REFUSED)
    for addr in PLACES[place]:
        for op in (WD.MEM_WR, WD.MEM_WR_PTL):
            for mf, mv in ((MF.META0_STATE, MV.I), (MF.NO_OP, MV.I), (MF.META0_STATE, MV.A)):
                a = expected_rwd(CFG, rwd(op, ST.NO_OP, mf, mv, addr, poison=1))
                assert a.error == err and a.ndr == NDR.CMP and a.drs is None
                assert a.media_write == (err == E.NONE)
                if err != E.NONE:
                    assert a.sf_after is None and a.grant is None
        a = expected_rwd(CFG, rwd(WD.BI_CONFLICT, ST.SNP_INV, MF.NO_OP, MV.I, addr, tag=0xFFFF))
        assert a == Answer(ndr=NDR.BI_CONFLICT_ACK, tag=0xFFFF)


def test_host_region_decodes_line_addresses_and_ignores_nothing_above_addr_bits():
    """host_region: line address -> region; bits at or above addr_bits - 6 make it NXM even
    when the low bits would alias a region."""
    for place, addrs in PLACES.items():
        for a in addrs:
            assert host_region(CFG, a) == REGION_OF_PLACE[place], (place, hex(a))
    small = DeviceConfig(addr_bits=40)
    assert host_region(small, (1 << 34) | 5) is None and host_region(small, 5) == "table"


# (opcode, snp, meta_field, meta_value, place, expected error)  representative illegal Reqs
ILLEGAL_REQ_CASES = [
    (RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.S, "table", E.ILLEGAL_REQ),     # wrong meta
    (RQ.MEM_RD, ST.SNP_DATA, MF.NO_OP, MV.I, "staging", E.ILLEGAL_REQ),
    (RQ.MEM_RD, ST.NO_OP, MF.META0_STATE, MV.A, "table", E.ILLEGAL_REQ),
    (RQ.MEM_RD, ST.SNP_CUR, MF.META0_STATE, MV.I, "superblock", E.ILLEGAL_REQ),  # beats REFUSED
    (RQ.MEM_RD_DATA, ST.SNP_INV, MF.META0_STATE, MV.A, "table", E.ILLEGAL_REQ),
    (RQ.MEM_INV, ST.SNP_DATA, MF.META0_STATE, MV.A, "table", E.ILLEGAL_REQ),
    (RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.S, "gap", E.ILLEGAL_REQ),       # beats NXM
    (RQ.MEM_CLN_EVCT, ST.SNP_INV, MF.META0_STATE, MV.I, "table", E.ILLEGAL_REQ),
    (RQ.MEM_CLN_EVCT, ST.NO_OP, MF.NO_OP, MV.I, "log", E.ILLEGAL_REQ),
    (0b0011, ST.NO_OP, MF.NO_OP, MV.I, "table", E.ILLEGAL_REQ),                 # undefined opcode
    (0b1111, ST.SNP_INV, MF.META0_STATE, MV.A, "table", E.ILLEGAL_REQ),
    (RQ.MEM_RD, 0b111, MF.NO_OP, MV.I, "table", E.ILLEGAL_REQ),                 # reserved SnpType
]


def case_id(c):
    return f"{c[0]:04b}-{c[1]}-{c[2]}-{c[3]}-{c[4]}"


@pytest.mark.parametrize("case", ILLEGAL_REQ_CASES, ids=case_id)
def test_illegal_req_reads_get_nxm_data_others_cmp(case):
    """An illegal Req is ILLEGAL_REQ (before any region decision): MemRd/MemRdData get
    MemData-NXM, anything else Cmp; no SF change, grant or media access."""
    op, snp, mf, mv, place, err = case
    a = expected_req(CFG, req(op, snp, mf, mv, PLACES[place][0], tag=3))
    read = op in (RQ.MEM_RD, RQ.MEM_RD_DATA)
    assert a == (Answer(drs=DRS.MEM_DATA_NXM, error=err, tag=3) if read else
                 Answer(ndr=NDR.CMP, error=err, tag=3))


ILLEGAL_RWD_CASES = [
    (WD.MEM_WR, ST.SNP_INV, MF.META0_STATE, MV.I, "table"),     # writes need SnpType No-Op
    (WD.MEM_WR_PTL, ST.SNP_DATA, MF.NO_OP, MV.I, "staging"),
    (WD.MEM_WR, ST.NO_OP, 0b01, MV.I, "table"),                  # reserved MetaField
    (WD.MEM_WR, ST.NO_OP, MF.META0_STATE, 0b01, "table"),        # reserved MetaValue
    (WD.MEM_WR, ST.SNP_CUR, MF.META0_STATE, MV.I, "log"),        # beats REFUSED
    (0b0000, ST.NO_OP, MF.NO_OP, MV.I, "table"),                 # undefined opcode
    (0b1000, ST.NO_OP, MF.META0_STATE, MV.I, "gap"),             # beats NXM
]


@pytest.mark.parametrize("case", ILLEGAL_RWD_CASES, ids=case_id)
def test_illegal_rwd_gets_cmp_and_writes_nothing(case):
    """An illegal RwD is ILLEGAL_RWD: Cmp, nothing written, SF and grant unchanged."""
    op, snp, mf, mv, place = case
    a = expected_rwd(CFG, rwd(op, snp, mf, mv, PLACES[place][0], tag=8))
    assert a == Answer(ndr=NDR.CMP, error=E.ILLEGAL_RWD, tag=8)


def test_exhaustive_req_sweep_every_combination_has_exactly_one_documented_outcome():
    """All 16 opcodes x 8 SnpTypes x 4 MetaFields x 4 MetaValues in every place: the answer is
    exactly the doc's (served row, dropped MemSpecRd, REFUSED, NXM or ILLEGAL_REQ), every read
    gets exactly one DRS, every other non-MemSpecRd exactly one NDR, nothing else responds."""
    seen = set()
    for op, snp, mf, mv in itertools.product(range(16), range(8), range(4), range(4)):
        row = doc_row(REQ_ROWS, op, snp, mf, mv)
        is_read = op in (RQ.MEM_RD, RQ.MEM_RD_DATA)
        for place, addrs in PLACES.items():
            region = REGION_OF_PLACE[place]
            for addr in addrs[:2]:
                a = expected_req(CFG, req(op, snp, mf, mv, addr, tag=op * 16 + snp))
                assert a.tag == op * 16 + snp
                if op == RQ.MEM_SPEC_RD:
                    outcome = "dropped"
                    assert a == Answer(tag=a.tag)
                elif row is None:
                    outcome = "illegal"
                elif region is None:
                    outcome = "nxm"
                elif region in ("table", "staging") or (
                        region in ("superblock", "slots") and op == RQ.MEM_RD
                        and snp == ST.SNP_CUR and mf == MF.NO_OP):
                    outcome = "served"
                else:
                    outcome = "refused"
                seen.add(outcome)
                err = {"dropped": E.NONE, "served": E.NONE, "illegal": E.ILLEGAL_REQ,
                       "nxm": E.NXM, "refused": E.REFUSED}[outcome]
                assert a.error == err, (op, snp, mf, mv, place, a)
                if outcome == "served":
                    drs, ndr, sf, grant, rd = row[5]
                    assert (a.drs, a.ndr, a.sf_after, a.grant, a.media_read, a.media_write) == \
                        (drs, ndr, sf, grant, rd, False)
                elif outcome != "dropped":
                    assert (a.sf_after, a.grant, a.media_read, a.media_write) == \
                        (None, None, False, False)
                    assert (a.drs, a.ndr) == ((DRS.MEM_DATA_NXM, None) if is_read
                                              else (None, NDR.CMP))
                # response shape: reads one DRS (+ NDR iff really served), others one NDR
                if op == RQ.MEM_SPEC_RD:
                    assert a.responses == 0
                elif is_read:
                    assert a.drs is not None and (a.ndr is not None) == (a.drs == DRS.MEM_DATA)
                    assert a.media_read == (a.drs == DRS.MEM_DATA)
                else:
                    assert a.drs is None and a.ndr is not None and not a.media_read
    assert seen == {"dropped", "illegal", "nxm", "served", "refused"}


def test_exhaustive_rwd_sweep_every_combination_has_exactly_one_documented_outcome():
    """All RwD opcode/SnpType/meta encodings (poison 0 and 1) in every place: exactly one NDR
    (BI-ConflictAck for BIConflict, Cmp otherwise), never a DRS, a media write only for a legal
    write in table/staging, and the error the doc gives (ILLEGAL_RWD before NXM/REFUSED)."""
    for op, snp, mf, mv in itertools.product(range(16), range(8), range(4), range(4)):
        row = doc_row(RWD_ROWS, op, snp, mf, mv)
        for place, addrs in PLACES.items():
            region = REGION_OF_PLACE[place]
            a = expected_rwd(CFG, rwd(op, snp, mf, mv, addrs[0], tag=op, poison=(snp + mv) & 1))
            assert a.drs is None and a.ndr is not None and a.responses == 1 and not a.media_read
            if op == WD.BI_CONFLICT:
                assert a == Answer(ndr=NDR.BI_CONFLICT_ACK, tag=op)
            elif row is None:
                assert a == Answer(ndr=NDR.CMP, error=E.ILLEGAL_RWD, tag=op)
            elif region is None:
                assert a == Answer(ndr=NDR.CMP, error=E.NXM, tag=op)
            elif region not in ("table", "staging"):
                assert a == Answer(ndr=NDR.CMP, error=E.REFUSED, tag=op)
            else:
                ndr, sf, grant, wr = row[5]
                assert a == Answer(ndr=ndr, sf_after=sf, grant=grant, media_write=wr, tag=op)


@pytest.mark.parametrize("mv,sf,err,sf_after", [
    (MV.A, "I", E.SF_MISS_OWNED, None), (MV.S, "I", E.SF_MISS_OWNED, None),
    (MV.A, "S", E.NONE, "A"), (MV.S, "A", E.NONE, "S"), (MV.A, None, E.NONE, "A"),
    (MV.I, "I", E.NONE, "I"),
])
def test_memwr_keeping_a_or_s_needs_a_tracked_line_else_sf_miss_owned_but_still_writes(
        mv, sf, err, sf_after):
    """MemWr Meta0 A/S to a line the SF does not hold: SF_MISS_OWNED, write done, SF unchanged."""
    a = expected_rwd(CFG, rwd(WD.MEM_WR, ST.NO_OP, MF.META0_STATE, mv), sf=sf)
    assert (a.error, a.sf_after, a.media_write, a.ndr) == (err, sf_after, True, NDR.CMP)


@pytest.mark.parametrize("hdr", [
    {"opcode": 16, "snp_type": 0, "meta_field": 0, "meta_value": 0, "addr": 0},
    {"opcode": 1, "snp_type": 8, "meta_field": 0, "meta_value": 0, "addr": 0},
    {"opcode": 1, "snp_type": 0, "meta_field": 0, "meta_value": 0, "addr": 1 << 46},
    {"opcode": 1, "snp_type": 0, "meta_field": 0, "meta_value": 0, "addr": -1},
    {"opcode": 1, "snp_type": 0, "meta_field": 0, "meta_value": 0, "addr": 0, "tag": 1 << 16},
    {"opcode": 1, "snp_type": 0, "meta_field": 0, "addr": 0},
    {"opcode": 1.0, "snp_type": 0, "meta_field": 0, "meta_value": 0, "addr": 0},
])
def test_header_fields_outside_their_widths_or_missing_raise_valueerror(hdr):
    """Malformed headers are a caller error, not a DCOH answer."""
    with pytest.raises(ValueError):
        expected_req(CFG, hdr)
    with pytest.raises(ValueError):
        expected_rwd(CFG, dict(hdr, poison=0))


@pytest.mark.parametrize("poisoned,write_poison,be,after", [
    (False, True, (1 << 64) - 1, True),      # a poisoned full-line write sets it
    (False, True, 1 << 5, True),             # ... and a poisoned one-byte write
    (True, True, 0, True),                   # ... and one with no byte enabled
    (True, False, (1 << 64) - 1, False),     # a clean full-line write clears it
    (True, False, (1 << 64) - 2, True),      # a clean 63-byte write leaves it
    (True, False, 0, True),
    (False, False, 1 << 7, False),
    (False, False, (1 << 64) - 1, False),
])
def test_media_poison_after(poisoned, write_poison, be, after):
    """The media's poison bit of a line after one write (docs/coherence.md "Poison")."""
    assert media_poison_after(poisoned, write_poison, be) is after


def test_rwd_rejects_bad_poison_and_sf_arguments():
    """poison must be 0/1 and sf one of None/I/S/A."""
    with pytest.raises(ValueError):
        expected_rwd(CFG, rwd(WD.MEM_WR, 0, 0, 0, poison=2))
    with pytest.raises(ValueError):
        expected_rwd(CFG, rwd(WD.MEM_WR, 0, 0, 0), sf="E")
    assert NXM_DATA == b"\xff" * 64


# =============================================================================================
# BISnp / BIRsp
# =============================================================================================

ALLOWED_BIRSP = {BS.BISNP_INV: {BR.BIRSP_I}, BS.BISNP_DATA: {BR.BIRSP_I, BR.BIRSP_S},
                 BS.BISNP_CUR: {BR.BIRSP_I, BR.BIRSP_S, BR.BIRSP_E}}


def test_birsp_allowed_matches_the_doc_for_every_snoop_and_answer_encoding():
    """BISnpInv→I, BISnpData→I/S, BISnpCur→I/S/E; Blk answers, Blk snoops and undefined
    encodings never allowed."""
    for snp in range(16):
        for rsp in range(16):
            assert birsp_allowed(snp, rsp) == (rsp in ALLOWED_BIRSP.get(snp, set())), (snp, rsp)


@pytest.mark.parametrize("rsp,sf", [(BR.BIRSP_I, "I"), (BR.BIRSP_S, "S"), (BR.BIRSP_E, "A"),
                                    (BR.BIRSP_I_BLK, "I"), (BR.BIRSP_S_BLK, "S"),
                                    (BR.BIRSP_E_BLK, "A")])
def test_sf_after_birsp_is_what_the_host_said(rsp, sf):
    """SF after BIRsp: I (freed), S, E→A; Blk variants set what the host said too."""
    assert sf_after_birsp(rsp) == sf


def test_sf_after_undefined_birsp_encoding_is_unspecified_and_raises():
    """Undefined BIRsp encodings have no documented SF update: ValueError, not a guess."""
    for rsp in (0b0011, 0b0111, 0b1000, 0b1111):
        with pytest.raises(ValueError, match="undefined"):
            sf_after_birsp(rsp)


# =============================================================================================
# HostPermission
# =============================================================================================

def test_permission_follows_grants_downgrades_and_birsp():
    """Cmp-E → E, Cmp-S → S, Cmp changes nothing, MemWr/MemInv/MemClnEvct Meta0=I → I,
    MemWr Meta0=S caps at S, BIRsp caps at what the host said and never upgrades."""
    p = HostPermission(CFG)
    L = 0x40
    assert p.state(L) == "I"
    p.req(L, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 1)
    p.response(L, 5, ndr=None, last=False)            # MemData first
    assert p.state(L) == "I"
    p.response(L, 6, ndr=NDR.CMP_E)
    assert p.state(L) == "E"
    p.rwd(L, WD.MEM_WR, MF.META0_STATE, MV.A, 7)       # write-back keeping E: unchanged
    assert p.state(L) == "E"
    p.rwd(L, WD.MEM_WR, MF.META0_STATE, MV.S, 8)
    assert p.state(L) == "S"
    p.rwd(L, WD.MEM_WR, MF.META0_STATE, MV.A, 9)       # cannot climb back with a write
    assert p.state(L) == "S"
    p.rwd(L, WD.MEM_WR, MF.NO_OP, MV.I, 10)
    assert p.state(L) == "S"
    p.rwd(L, WD.MEM_WR_PTL, MF.META0_STATE, MV.I, 11)
    assert p.state(L) == "I"
    p.req(L, RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, 12)
    p.response(L, 20, ndr=NDR.CMP_S)
    assert p.state(L) == "S"
    p.req(L, RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, 21)
    p.response(L, 30, ndr=NDR.CMP)
    assert p.state(L) == "S"
    p.req(L, RQ.MEM_CLN_EVCT, ST.NO_OP, MF.META0_STATE, MV.I, 31)
    assert p.state(L) == "I"                           # at send, before its Cmp
    p.response(L, 35, ndr=NDR.CMP)
    p.req(L, RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A, 40)
    p.response(L, 41, ndr=NDR.CMP_E)
    p.bisnp(L, BS.BISNP_DATA, 3, 50)
    assert p.outstanding_bisnp(L) == 3 and p.state(L) == "E"
    assert p.birsp(3, BR.BIRSP_S, 60) == E.NONE
    assert p.state(L) == "S" and p.outstanding_bisnp(L) is None
    p.bisnp(L, BS.BISNP_CUR, 3, 61)
    assert p.birsp(3, BR.BIRSP_E, 62) == E.NONE and p.state(L) == "S"   # no upgrade
    p.req(L, RQ.MEM_INV_NT, ST.SNP_INV, MF.META0_STATE, MV.I, 70)
    assert p.state(L) == "I"


def test_birsp_errors_unknown_tag_changes_nothing_wrong_kind_frees_and_caps():
    """Rule 7: unknown BITag → BIRSP_TAG, nothing changes; a disallowed (or Blk) answer →
    BIRSP_KIND, the tag is freed and the permission capped at what the host said."""
    p = HostPermission(CFG)
    p.req(1, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 0)
    p.response(1, 3, ndr=NDR.CMP_E)
    assert p.birsp(5, BR.BIRSP_I, 4) == E.BIRSP_TAG and p.state(1) == "E"
    p.bisnp(1, BS.BISNP_INV, 5, 5)
    assert p.birsp(5, BR.BIRSP_S, 6) == E.BIRSP_KIND and p.state(1) == "S"
    assert p.birsp(5, BR.BIRSP_I, 7) == E.BIRSP_TAG and p.state(1) == "S"
    p.bisnp(1, BS.BISNP_DATA, 5, 8)
    assert p.birsp(5, BR.BIRSP_I_BLK, 9) == E.BIRSP_KIND and p.state(1) == "I"
    p.bisnp(1, BS.BISNP_CUR, 0, 10)
    assert p.birsp(0, 0b0011, 11) == E.BIRSP_KIND and p.state(1) == "I"   # undefined opcode


def test_bisnp_tag_reuse_second_snoop_and_out_of_range_tag_are_rule7_violations():
    """A BITag in use maps to exactly one outstanding BISnp; one BISnp per line; tag < bi_tags."""
    p = HostPermission(CFG)
    p.bisnp(0x10, BS.BISNP_INV, 2, 100)
    with pytest.raises(CoherenceViolation, match=r"rule 7 violation, line 0x20.*bi_tag 2 reused"):
        p.bisnp(0x20, BS.BISNP_INV, 2, 101)
    with pytest.raises(CoherenceViolation, match="second BISnp"):
        p.bisnp(0x10, BS.BISNP_DATA, 3, 102)
    with pytest.raises(CoherenceViolation, match="outside 0..7"):
        p.bisnp(0x30, BS.BISNP_INV, CFG.bi_tags, 103)
    assert p.birsp(2, BR.BIRSP_I, 110) == E.NONE
    p.bisnp(0x20, BS.BISNP_INV, 2, 111)                 # free again: fine


def test_rule5_req_accepted_after_bisnp_must_wait_for_its_birsp():
    """Rule 5: a Req accepted at/after a BISnp to its line is answered only after the BIRsp;
    a Req accepted before it may be answered on either side (BIConflict race)."""
    p = HostPermission(CFG)
    L = 0x99
    p.bisnp(L, BS.BISNP_INV, 1, 10)
    p.req(L, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 10)
    with pytest.raises(CoherenceViolation, match=r"rule 5.*accepted at 10 answered \(NDR CMP_E\) at 12"):
        p.response(L, 12, ndr=NDR.CMP_E)
    q = HostPermission(CFG, raise_on_violation=False)      # collected once per Req
    q.bisnp(L, BS.BISNP_INV, 1, 10)
    q.req(L, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 11)
    q.response(L, 12, ndr=None, last=False)
    q.response(L, 13, ndr=NDR.CMP_E)
    assert len(q.violations) == 1 and "answered (DRS) at 12" in str(q.violations[0])
    p = HostPermission(CFG)
    p.bisnp(L, BS.BISNP_INV, 1, 10)
    p.req(L, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 11)
    assert p.birsp(1, BR.BIRSP_I, 20) == E.NONE
    p.response(L, 30, ndr=None, last=False)
    p.response(L, 31, ndr=NDR.CMP_E)
    assert p.state(L) == "E"
    # race: Req accepted before the BISnp, answered while it is outstanding: legal
    p.req(L, RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, 40)
    p.bisnp(L, BS.BISNP_INV, 2, 41)
    p.response(L, 45, ndr=NDR.CMP_S)
    assert p.state(L) == "S"
    assert p.birsp(2, BR.BIRSP_I, 50) == E.NONE and p.state(L) == "I"


def test_device_access_rules_2_and_3():
    """Rule 2: device writes need permission I. Rule 3: device reads need at most S, or a
    BISnpCur answered since the last Cmp-E."""
    p = HostPermission(CFG)
    L = 7
    p.device_access(L, True, 0)
    p.device_access(L, False, 0)
    p.req(L, RQ.MEM_RD, ST.SNP_DATA, MF.META0_STATE, MV.S, 1)
    p.response(L, 2, ndr=NDR.CMP_S)
    p.device_access(L, False, 3)
    with pytest.raises(CoherenceViolation, match="rule 2.*device write while the host may hold S"):
        p.device_access(L, True, 4, who="engine3")
    p.req(L, RQ.MEM_INV, ST.SNP_INV, MF.META0_STATE, MV.A, 5)
    p.response(L, 6, ndr=NDR.CMP_E)
    with pytest.raises(CoherenceViolation, match="rule 3"):
        p.device_access(L, False, 7)
    p.bisnp(L, BS.BISNP_CUR, 0, 8)
    p.birsp(0, BR.BIRSP_E, 9)
    p.device_access(L, False, 10)                      # after BISnpCur completed
    p.req(L, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 11)
    p.response(L, 12, ndr=NDR.CMP_E)                   # new grant ends that
    with pytest.raises(CoherenceViolation, match="rule 3"):
        p.device_access(L, False, 13)


def test_rule1_checks_host_state_and_snoop_filter_and_can_collect_instead_of_raising():
    """Rule 1: the host holds at most its permission and the SF covers it (E needs A); with
    raise_on_violation=False violations are collected."""
    p = HostPermission(CFG, raise_on_violation=False)
    L = 0x123
    assert p.check_host(L, "I") is None and p.check_sf(L, "I") is None
    v = p.check_host(L, "S", t=5)
    assert isinstance(v, CoherenceViolation) and "line 0x123" in str(v) and "host holds S" in str(v)
    p.req(L, RQ.MEM_RD_DATA, ST.SNP_DATA, MF.NO_OP, MV.I, 6)
    p.response(L, 9, ndr=NDR.CMP_E)
    assert p.check_host(L, "M") is None and p.check_sf(L, "A") is None
    assert isinstance(p.check_sf(L, "S"), CoherenceViolation)
    assert len(p.violations) == 2 and all(v.rule == "rule 1" for v in p.violations)


# =============================================================================================
# LineValueChecker
# =============================================================================================

def fill(v):
    return bytes([v]) * 64


def test_stale_value_rejected_after_a_completed_write():
    """A read starting after a write completed must see it (or a later one), not the old value."""
    c = LineValueChecker()
    c.write(5, fill(1), ALL, 10, 20, who="host")
    assert c.read(5, fill(1), 21, 30) is None
    assert c.read(5, fill(0), 5, 9) is None               # before the write: initial
    with pytest.raises(CoherenceViolation) as ei:
        c.read(5, fill(0), 21, 30, who="dev7")
    msg = str(ei.value)
    assert "line 0x5 " in msg and "dev7" in msg and "t=21/30" in msg and "64 unexplained" in msg
    assert "allowed 0x01 (write by host [10, 20])" in msg


def test_concurrent_write_accepted_either_way():
    """A write overlapping the read may or may not be seen: old and new both explained."""
    c = LineValueChecker()
    c.write(1, fill(1), ALL, 0, 5)
    c.write(1, fill(2), ALL, 10, 20)
    for t0, t1 in ((8, 10), (15, 15), (20, 30), (12, 25)):
        assert c.read(1, fill(1), t0, t1) is None and c.read(1, fill(2), t0, t1) is None
    with pytest.raises(CoherenceViolation):
        c.read(1, fill(0), 8, 10)                          # initial is gone: write 1 completed
    c.write(2, fill(3), ALL, 10, 20)
    assert c.read(2, fill(0), 0, 10) is None and c.read(2, fill(3), 0, 10) is None


def test_superseded_write_rejected_but_unordered_completed_writes_both_allowed():
    """w1 then w2 starting after w1 ended: a read after both sees only w2. Overlapping w3, w4
    that both ended: either; a w5 starting after both ended supersedes both."""
    c = LineValueChecker()
    c.write(9, fill(1), ALL, 0, 5)
    c.write(9, fill(2), ALL, 6, 8)
    with pytest.raises(CoherenceViolation, match="allowed 0x02"):
        c.read(9, fill(1), 9, 9)
    assert c.read(9, fill(1), 8, 9) is None               # w2 not complete before the read
    c.write(9, fill(3), ALL, 10, 20)
    c.write(9, fill(4), ALL, 15, 25)
    assert c.read(9, fill(3), 30, 31) is None and c.read(9, fill(4), 30, 31) is None
    with pytest.raises(CoherenceViolation):
        c.read(9, fill(2), 30, 31)
    c.write(9, fill(5), ALL, 32, 33)
    assert c.read(9, fill(5), 34, 35) is None
    for v in (3, 4):
        with pytest.raises(CoherenceViolation):
            c.read(9, fill(v), 34, 35)


def test_partial_writes_checked_per_byte():
    """Byte enables: each byte follows its own last writer; one wrong byte is reported with
    its offset and candidates."""
    c = LineValueChecker(initial=lambda line: bytes(range(64)))
    c.write(3, fill(0xAA), 0x0000_0000_0000_00FF, 0, 1)      # bytes 0..7
    c.write(3, fill(0xBB), 0xFF00_0000_0000_0000, 2, 3)      # bytes 56..63
    c.write(3, fill(0xCC), 0x0000_0000_0000_0F00, 4, 5)      # bytes 8..11
    want = bytearray(range(64))
    want[0:8], want[56:64], want[8:12] = b"\xaa" * 8, b"\xbb" * 8, b"\xcc" * 4
    assert c.read(3, bytes(want), 6, 6) is None
    c.write(3, fill(0xDD), 0x0000_0000_0000_0003, 7, 9)      # bytes 0, 1 concurrent with read
    mix = bytearray(want)
    mix[0] = 0xDD                                             # byte 0 new, byte 1 old: fine
    assert c.read(3, bytes(mix), 8, 8) is None
    want[0:2] = b"\xdd\xdd"                                   # bytes 0, 1 settled to 0xDD
    bad = bytearray(want)
    bad[10] = 0xAA
    with pytest.raises(CoherenceViolation) as ei:
        c.read(3, bytes(bad), 10, 10)
    msg = str(ei.value)
    assert "1 unexplained" in msg and "byte +0a: got 0xaa, allowed 0xcc" in msg
    bad = bytearray(want)
    bad[20] = 0
    with pytest.raises(CoherenceViolation, match=r"byte \+14: got 0x00, allowed 0x14 \(initial\)"):
        c.read(3, bytes(bad), 10, 10)


def test_host_store_and_local_load_are_point_intervals():
    """A CPU store into its cache is a write with t_start == t_end: a load in the same cycle
    may see either value, a load one cycle later only the store's."""
    c = LineValueChecker()
    c.write(4, fill(7), ALL, 100, 100, who="cpu store")
    assert c.read(4, fill(0), 100, 100, who="cpu load") is None
    assert c.read(4, fill(7), 100, 100) is None
    assert c.read(4, fill(7), 101, 101) is None
    with pytest.raises(CoherenceViolation):
        c.read(4, fill(0), 101, 101, who="cpu load")


def test_out_of_order_write_reports_and_write_begin_end():
    """Writes may be reported in any order; write_begin makes an in-flight write explain
    reads that end after it started; write_end settles it."""
    c = LineValueChecker()
    c.write(6, fill(2), ALL, 10, 12)          # reported first, but started later
    c.write(6, fill(1), ALL, 0, 30)           # long write, overlapping the first
    assert c.read(6, fill(1), 40, 40) is None and c.read(6, fill(2), 40, 40) is None
    h = c.write_begin(6, fill(3), ALL, 50, who="dev")
    assert c.read(6, fill(3), 45, 55) is None and c.read(6, fill(1), 45, 55) is None
    assert c.read(6, fill(3), 60, 60) is None and c.read(6, fill(2), 60, 60) is None
    c.write_end(h, 70)
    assert c.read(6, fill(3), 71, 71) is None
    with pytest.raises(CoherenceViolation):
        c.read(6, fill(2), 71, 71)
    with pytest.raises(ValueError, match="unknown or already ended"):
        c.write_end(h, 80)


def test_reporting_contract_violations_raise_valueerror():
    """A write starting before an already checked read's end, a read before the horizon, and
    malformed arguments are caller errors (ValueError), not device violations."""
    c = LineValueChecker()
    c.read(1, fill(0), 10, 20)
    with pytest.raises(ValueError, match="reported after a read"):
        c.write(1, fill(1), ALL, 19, 25)
    c.write(1, fill(1), ALL, 20, 25)          # same cycle as the read's end: tolerated
    h = c.write_begin(1, fill(2), ALL, 30)
    c.read(1, fill(2), 40, 41)
    with pytest.raises(ValueError, match="write_end .* after a read starting at 40"):
        c.write_end(h, 39)
    c.advance(100)
    with pytest.raises(ValueError, match="horizon"):
        c.read(1, fill(1), 99, 120)
    for bad in (lambda: c.write(1, b"\x00" * 63, ALL, 200, 201),
                lambda: c.write(1, fill(0), 1 << 64, 200, 201),
                lambda: c.write(1, fill(0), ALL, 202, 201),
                lambda: c.read(1, fill(0), 205, 204),
                lambda: LineValueChecker(max_age=-1),
                lambda: LineValueChecker(initial=lambda l: b"x").read(0, fill(0), 0, 0)):
        with pytest.raises(ValueError):
            bad()


def test_read_poison_bit_follows_the_media_rule():
    """The poison bit of a read is checked (data of a poisoned read is not): 0 on a line never
    written with poison; after a poisoned write 1, kept by a partial clean write, cleared by a
    full-line clean one; while a deciding write is in flight, either bit."""
    c = LineValueChecker(raise_on_violation=False)
    assert c.read(1, fill(0), 0, 1, poison=True) is not None          # never poisoned
    assert c.violations[-1].rule == "poison"
    c.write(2, fill(1), ALL, 10, 12, poison=True)
    assert c.read(2, fill(1), 13, 14) is not None                     # must be poisoned
    assert c.read(2, fill(0), 13, 14, poison=True) is None
    c.write(2, fill(2), ALL >> 8, 20, 22)                             # partial clean: kept
    assert c.read(2, fill(0), 23, 24, poison=True) is None
    assert c.read(2, fill(2), 23, 24) is not None
    h = c.write_begin(2, fill(3), ALL, 30)                            # full clean, in flight
    assert c.read(2, fill(0), 31, 32, poison=True) is None
    assert c.read(2, fill(3)[:56] + fill(1)[56:], 31, 32) is None
    c.write_end(h, 35)
    assert c.read(2, fill(3), 36, 37) is None
    assert c.read(2, fill(3), 36, 37, poison=True) is not None        # cleared
    assert [v.rule for v in c.violations] == ["poison"] * 4


def test_poisoned_reads_are_counted_not_checked_and_violations_can_be_collected():
    """Poison is not a value: poisoned reads are skipped and counted; with
    raise_on_violation=False a failing read returns its CoherenceViolation and keeps going."""
    c = LineValueChecker(raise_on_violation=False)
    c.write(2, fill(9), ALL, 0, 1, poison=True)
    assert c.read(2, NXM_DATA, 5, 6, poison=True) is None
    c.write(2, fill(7), ALL, 4, 7)         # a clean full-line write concurrent with the reads
    v = c.read(2, fill(8), 5, 6, who="host")
    assert isinstance(v, CoherenceViolation) and v.rule == "value" and v.line == 2 and v.times == (5, 6)
    assert "poisoned" in str(v)
    assert c.stats["poisoned_reads"] == 1 and c.stats["poisoned_writes"] == 1
    assert c.stats["violations"] == 1 and c.violations == [v]


def test_max_age_moves_the_horizon_and_prunes_superseded_history():
    """With max_age the horizon follows the latest cycle; superseded writes are pruned and
    answers are unchanged."""
    c = LineValueChecker(max_age=10)
    for i in range(100):
        c.write(0, fill(i % 256), ALL, 2 * i, 2 * i + 1)
    assert c.stats["pruned"] > 80 and len(c._lines[0].writes) < 20     # bounded by the window
    assert c.read(0, fill(98), 199, 200) is None        # overlaps write 99 [198, 199]
    assert c.read(0, fill(99), 200, 201) is None
    with pytest.raises(CoherenceViolation):
        c.read(0, fill(98), 200, 201)
    with pytest.raises(ValueError, match="horizon"):
        c.read(0, fill(98), 100, 200)


# --- brute-force oracle ------------------------------------------------------------------------

def oracle_values(writes, rs, re, init):
    """Per byte, every value a read over [rs, re] can return in some order of the writes and the
    read consistent with real time (op a precedes op b iff a ends before b starts): depth-first
    over prefixes of such orders, stopping where the read is placed."""
    ops = [(w[0], w[1]) for w in writes] + [(rs, re)]
    R = len(writes)
    out = [set() for _ in range(64)]
    seen = set()

    def dfs(img, remaining):
        key = (bytes(img), remaining)
        if key in seen:
            return
        seen.add(key)
        for y in remaining:
            if any(ops[x][1] < ops[y][0] for x in remaining if x != y):
                continue                       # some unplaced op must come before y
            if y == R:
                for b in range(64):
                    out[b].add(img[b])
                continue
            ws, we, data, be = writes[y]
            nxt = bytearray(img)
            for b in range(64):
                if (be >> b) & 1:
                    nxt[b] = data[b]
            dfs(nxt, remaining - {y})

    dfs(bytearray(init), frozenset(range(R + 1)))
    return out


def random_write(rng, tmax=10, maxlen=4):
    ws = rng.randint(0, tmax)
    kind = rng.random()
    be = ALL if kind < 0.4 else rng.getrandbits(64) if kind < 0.8 else \
        (1 << rng.randrange(64)) | (1 << rng.randrange(64)) | (1 << rng.randrange(64))
    data = bytes(rng.randint(1, 3) for _ in range(64))
    return (ws, ws + rng.randint(0, maxlen), data, be)


def test_randomized_single_reads_agree_with_brute_force_linearization_oracle(seed):
    """400 tiny histories (<= 5 writes, partial byte enables, 3-value alphabet so values
    collide): candidates() equals the oracle's value sets, reads built from them pass and a read
    with one byte outside its set fails."""
    rng = random.Random(seed)
    for _ in range(400):
        init = bytes(rng.randint(0, 3) for _ in range(64))
        writes = [random_write(rng) for _ in range(rng.randint(0, 5))]
        rs = rng.randint(0, 13)
        re = rs + rng.randint(0, 4)
        sets = oracle_values(writes, rs, re, init)
        c = LineValueChecker(initial=lambda line: init)
        for w in sorted(writes, key=lambda w: rng.random()):
            c.write(0x77, w[2], w[3], w[0], w[1])
        got = [set(d) for d in c.candidates(0x77, rs, re)]
        assert got == sets, (writes, rs, re)
        good = bytes(rng.choice(sorted(s)) for s in sets)
        assert c.read(0x77, good, rs, re) is None
        b = rng.randrange(64)
        if len(sets[b]) < 256:
            bad = bytearray(good)
            bad[b] = rng.choice([v for v in range(5) if v not in sets[b]])
            with pytest.raises(CoherenceViolation, match=rf"byte \+{b:02x}: got"):
                c.read(0x77, bytes(bad), rs, re)


@pytest.mark.parametrize("mode", ["write_at_end", "write_begin_end"])
def test_randomized_pruned_histories_with_late_reports_agree_with_oracle(seed, mode):
    """300 tiny histories with several reads, writes reported late (at their end plus a delay,
    or begun at their start and ended late), reads reported as late as the contract requires
    (after the writes that may explain them), advance() to the oldest
    unreported read and pruning forced on: every read is judged exactly as the oracle judges
    it on the full history."""
    rng = random.Random(seed * 7 + (mode == "write_begin_end"))
    for _ in range(300):
        init = bytes(rng.randint(0, 3) for _ in range(64))
        writes = [random_write(rng, tmax=20, maxlen=5) for _ in range(rng.randint(1, 7))]
        reads = []
        for _ in range(rng.randint(1, 5)):
            rs = rng.randint(0, 28)
            reads.append((rs, rs + rng.randint(0, 4)))
        events = []            # (report time, order, kind, index)
        if mode == "write_at_end":
            wrep = [w[1] + rng.randint(0, 3) for w in writes]
            for i, t in enumerate(wrep):
                events.append((t, 0, "w", i))
            for j, (rs, re) in enumerate(reads):
                need = max([wrep[i] for i, w in enumerate(writes) if w[0] <= re], default=re)
                events.append((max(re, need) + rng.randint(0, 2), 1, "r", j))
        else:
            erep = [w[1] + rng.randint(0, 3) for w in writes]
            for i, w in enumerate(writes):
                events.append((w[0], 0, "b", i))
                events.append((erep[i], 0, "e", i))
            for j, (rs, re) in enumerate(reads):
                need = max([erep[i] for i, w in enumerate(writes) if w[1] < rs], default=re)
                events.append((max(re, need) + rng.randint(0, 2), 1, "r", j))
        events.sort(key=lambda e: (e[0], e[1], e[2] == "e"))
        c = LineValueChecker(initial=lambda line: init)
        c.prune_threshold = 1
        handles, pending = {}, set(range(len(reads)))
        for _, _, kind, i in events:
            if kind == "w":
                c.write(0, writes[i][2], writes[i][3], writes[i][0], writes[i][1])
            elif kind == "b":
                handles[i] = c.write_begin(0, writes[i][2], writes[i][3], writes[i][0])
            elif kind == "e":
                c.write_end(handles[i], writes[i][1])
            else:
                c.advance(min(reads[j][0] for j in pending))
                pending.discard(i)
                rs, re = reads[i]
                sets = oracle_values(writes, rs, re, init)
                assert [set(d) for d in c.candidates(0, rs, re)] == sets, (writes, reads, i)
                good = bytes(rng.choice(sorted(s)) for s in sets)
                assert c.read(0, good, rs, re) is None
                b = rng.randrange(64)
                bad = bytearray(good)
                bad[b] = rng.choice([v for v in range(5) if v not in sets[b]])
                with pytest.raises(CoherenceViolation):
                    c.read(0, bytes(bad), rs, re)


# --- stress and timing -------------------------------------------------------------------------

def stress_ops(n_ops, seed, n_lines=300):
    """Operations on a simulated memory where each write lands at its end cycle and each read
    samples just before its end cycle, so every read is explainable: ("w", line, data, be,
    start, end) or ("r", line, data, start, end). Lines are Zipf-like hot (most ops on a few
    dozen lines); 45 % writes (40 % of them partial, 10 % point stores), reads up to 300 long."""
    rng = random.Random(seed)
    mem = {line: bytearray(64) for line in range(n_lines)}
    landing = []            # heap of (end cycle, seq, line, data, be)
    ops, t, seq = [], 0, 0
    for _ in range(n_ops):
        t += rng.randint(0, 1)
        while landing and landing[0][0] < t:
            _, _, line, data, be = heapq.heappop(landing)
            m = mem[line]
            if be == ALL:
                m[:] = data
            else:
                for b in range(64):
                    if (be >> b) & 1:
                        m[b] = data[b]
        line = min(int(rng.expovariate(1 / 40)), n_lines - 1)
        if rng.random() < 0.45:
            be = ALL if rng.random() < 0.6 else rng.getrandbits(64)
            data = rng.randbytes(64)
            lat = 0 if rng.random() < 0.1 else rng.randint(1, 40)
            ops.append(("w", line, data, be, t, t + lat))
            seq += 1
            heapq.heappush(landing, (t + lat, seq, line, data, be))
        else:
            ops.append(("r", line, bytes(mem[line]), t - rng.randint(0, 300), t))
    return ops


def run_ops(checker, ops):
    for op in ops:
        if op[0] == "w":
            checker.write(op[1], op[2], op[3], op[4], op[5], who="w")
        else:
            checker.read(op[1], op[2], op[3], op[4], who="r")


def test_stress_correct_memory_never_flagged_and_injected_errors_always_caught(seed):
    """20,000 operations over 300 hot lines with concurrent, partial and point writes: no false
    violation; every injected one-byte corruption (one read in 97, a value outside that byte's
    candidates) is caught."""
    rng = random.Random(seed)
    c = LineValueChecker(max_age=300)
    reads = caught = 0
    for op in stress_ops(20_000, seed):
        if op[0] == "w":
            c.write(*op[1:])
            continue
        _, line, data, rs, re = op
        reads += 1
        if reads % 97 == 0:
            cands = c.candidates(line, rs, re)
            b = rng.randrange(64)
            bad = bytearray(data)
            bad[b] = next(v for v in range(256) if v not in cands[b])
            with pytest.raises(CoherenceViolation, match=rf"byte \+{b:02x}: got"):
                c.read(line, bytes(bad), rs, re)
            caught += 1
        c.read(line, data, rs, re)
    assert caught == reads // 97 > 50 and c.stats["violations"] == caught


def test_200k_mixed_operations_keep_history_bounded(seed):
    """200,000 mixed checker calls over 300 hot lines: no violation, superseded writes pruned
    and the kept history bounded (so a 1M-message stress run stays linear). Prints the µs per
    operation; the speed is measured there, not asserted (about 1 s on the 2-core development
    machine)."""
    ops = stress_ops(200_000, seed)
    c = LineValueChecker(max_age=300)
    t0 = time.perf_counter()
    run_ops(c, ops)
    dt = time.perf_counter() - t0
    kept = sum(len(L.writes) for L in c._lines.values())
    print(f"{len(ops)} ops in {dt:.2f} s = {dt / len(ops) * 1e6:.1f} us/op; stats {c.stats}; "
          f"writes kept {kept}")
    assert c.stats["violations"] == 0 and c.stats["pruned"] > c.stats["writes"] // 2
    assert kept < 20 * 300                       # history stays bounded


def test_coherence_module_imports_no_amaranth_cocotb_or_rtl():
    """sw_model.coherence loads only hw, hw.config and hw.cxl_encodings from hw, and neither
    amaranth nor cocotb (it must stay independent of hw/dcoh)."""
    code = ("import sys, sw_model.coherence\n"
            "print(sorted(m for m in sys.modules\n"
            "             if m.split('.')[0] in ('amaranth', 'cocotb', 'hw')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       check=True)
    assert r.stdout.strip() == "['hw', 'hw.config', 'hw.cxl_encodings']", r.stdout + r.stderr
