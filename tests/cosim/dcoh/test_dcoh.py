"""cocotb tests of the DCOH (docs/coherence.md) through ``cosim.tb.dcoh.DcohTB``.

One Verilator build per configuration; the run's :class:`DcohParams` say which tests apply to
it (``set``): "main" (default build) or "small" (2 sets x 2 ways, 2 BITags and a 128-bit media
port: victims, a full tracker, and the poison tests on 4-beat lines). Every test ends with
``tb.finish()``: no violation from the host model, the scoreboard or the value checker, every
expected err pulse seen, and the DUT's counters equal to what the host saw.

Pytest launcher (end of file): DCOH cosim tier: the DCOH test top under Verilator against the host model and checkers.

Two configurations, one Verilator build each: the default DCOH (64 x 4 snoop filter, 8
BITags) for directed tests and the random stress, and a small one (2 x 2 snoop filter, 2
BITags) where every third request needs a victim and the tracker fills, with a 128-bit media
port (the fpga-ecp5 width, a line is a 4-beat burst) on which the poison tests run again.
Sizes are smoke sizes (``DcohParams.messages`` host messages per random test);
``trainingcxl stress`` runs long.
"""
import itertools
import random
from dataclasses import dataclass

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb, fcov, params
from cosim.cxl_host import ALL_BE, HostKnobs, fast_getter
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import BISnpLog, DcohTB, dcoh_top_build
from hw.config import DeviceConfig
from hw.cxl_encodings import (BIRspOpcode as BR, DRSOpcode as DR,
                              MetaField as MF, MetaValue as MV, NDROpcode as ND, ReqOpcode as RQ,
                              RwDOpcode as RW, SnpType as ST)
from sw_model.coherence import NXM_DATA



@dataclass(frozen=True)
class DcohParams:
    """One run: the bench (device configuration), which test set applies to it, and the host
    messages per random test (None: each test's own default)."""
    bench: BenchConfig = BenchConfig()
    set: str = "main"
    messages: int | None = None


P = params.current(DcohParams)
SET = P.set
MAIN = SET == "main"
SMALL = SET == "small"


def _calm_tb(dut, **kw):
    kw.setdefault("host_stall", 0.0)
    kw.setdefault("dev_stall", 0.0)
    kw.setdefault("knobs", HostKnobs.calm())
    return DcohTB(dut, **kw)


# ------------------------------------------------------------------------------ SF states
# (name, snoop-filter state, host state) reached through host traffic on a fresh line
SETUPS = {
    "I/I": ("I", "I"),
    "S/I": ("S", "I"),     # MemRd(S), then a silent drop
    "A/I": ("A", "I"),     # MemRd(A), then a silent drop
    "S/S": ("S", "S"),
    "A/E": ("A", "E"),
    "A/M": ("A", "M"),
}


async def _setup(tb, line, setup):
    host = tb.host
    if setup in ("S/I", "S/S"):
        await host.read(line, "shared")
    elif setup in ("A/I", "A/E", "A/M"):
        await host.read(line, "own")
    if setup in ("S/I", "A/I"):
        tb.core.silent_drop(line)
    if setup == "A/M":
        host.store(line, bytes(range(64)), 0x0F0F_0000_FFFF_0001)


async def _probe_sf(tb, line):
    """Snoop-filter state seen from outside: a device write back-invalidates unless it is I.
    Returns the number of BISnps the write caused (0 or 1)."""
    n0 = tb.core.stats["recv_s2m_bisnp"]
    await tb.dev.write(line, bytes([0xC3]) * 64)
    return tb.core.stats["recv_s2m_bisnp"] - n0


@cocotb.test(skip=not MAIN)
async def each_legal_request_in_each_sf_state(dut):
    """Every host request kind from every snoop-filter state it is legal in (host state
    permitting): responses exactly as the reference (checked by the host model), the grant
    the host gets, and the SF state afterwards (probed with a device write: BISnp iff not I)."""
    tb = _calm_tb(dut)
    await tb.reset()
    from cosim.cxl_host import REQ_KINDS
    idx = 0
    cases = 0
    for setup, (sf, hs) in SETUPS.items():
        for kind, spec in REQ_KINDS.items():
            if hs not in spec[5]:
                continue
            line = tb.line("table", 64 + idx)
            idx += 1
            await _setup(tb, line, setup)
            assert tb.core.state(line) == hs, (setup, tb.core.state(line))
            t = await tb.host.request(kind, line)
            e = t.expect
            want_sf = e.sf_after if e.sf_after is not None else sf
            if e.grant is not None:
                st = {"M": "E"}.get(tb.core.state(line), tb.core.state(line))
                assert st == e.grant, (kind, setup, tb.core.state(line), e.grant)
            # the host's state after: inv_own stores at once (M); writebacks keep what they said
            if tb.core.state(line) in "EM":
                await tb.host.evict(line)
                want_sf = "I"
            elif tb.core.state(line) == "S":
                tb.core.silent_drop(line)
            got = await _probe_sf(tb, line)
            assert got == (want_sf != "I"), \
                f"{kind} from {setup}: SF should be {want_sf} but a device write caused {got} BISnp"
            cases += 1
    dut._log.info(f"{cases} request/state cases")
    assert cases >= 40
    await tb.finish()


@cocotb.test(skip=not MAIN)
@cocotb.parametrize(conflict_tag=["fresh", "req"])
async def early_conflict(dut, conflict_tag):
    """MemRd(A) from S held back on the Req channel; a device write snoops the line; the host's
    BIConflict overtakes the Req, the Ack comes first, the host answers BIRspI from S, and the
    Req is served afterwards with Cmp-E."""
    knobs = HostKnobs.calm()
    knobs.conflict_tag = conflict_tag
    tb = _calm_tb(dut, knobs=knobs)
    await tb.reset()
    line = tb.line("table", 3)
    await tb.host.read(line, "shared")
    t = await tb.host.request("rd_own", line, wait=False, delay=60)
    w = tb.dev.submit("wr", line, bytes([0x77]) * 64)
    await tb.dev.wait(w)
    await tb.host.wait_txn(t)
    assert tb.core.stats["early_conflicts"] == 1 and tb.core.stats["late_conflicts"] == 0
    assert t.grant == "E" and t.drs_data == bytes([0x77]) * 64
    await tb.finish()


@cocotb.test(skip=not MAIN)
@cocotb.parametrize(conflict_tag=["fresh", "req"])
async def late_conflict(dut, conflict_tag):
    """MemRd(A) served (Cmp-E queued) while the host's NDR channel is held; a device write
    snoops the line; the BI-ConflictAck queues behind the Cmp, so the host completes the read
    and answers from its new state (E -> BIRspI) before the device write proceeds."""
    knobs = HostKnobs.calm()
    knobs.conflict_tag = conflict_tag
    tb = _calm_tb(dut, knobs=knobs)
    await tb.reset()
    line = tb.line("table", 4)
    tb.chans.hold("s2m_ndr", 200)
    t = await tb.host.request("rd_own", line, wait=False)
    await ClockCycles(dut.clk, tb.latency + 40)        # served, Cmp-E stuck in the NDR FIFO
    w = tb.dev.submit("wr", line, bytes([0x55]) * 64)
    await tb.dev.wait(w)
    await tb.host.wait_txn(t)
    assert tb.core.stats["late_conflicts"] == 1, tb.core.summary()
    assert tb.core.state(line) == "I"
    op = await tb.dev.read(line)
    assert op.resp == bytes([0x55]) * 64
    await tb.finish()


# Req kinds that can be pending when a BISnp arrives (all but MemSpecRd), with the setup
# (SETUPS) each is issued from here so that the snoop filter tracks the line; late: whether a
# late conflict is possible (the Req leaves the line tracked, so a BISnp can follow its
# service; the others leave SF I and only conflict early)
CONFLICT_KINDS = {
    "rd_shared": ("S/I", True), "rd_own": ("S/S", True), "rd_data": ("S/I", True),
    "rd_cur": ("S/S", True), "inv_own": ("S/S", True), "invnt_own": ("S/S", True),
    "inv_flush": ("S/S", False), "invnt_flush": ("S/S", False), "cln_evct": ("S/S", False),
}


@cocotb.test(skip=not MAIN)
async def conflict_with_each_request_kind(dut):
    """A device write snoops a line while the host has a Req of each kind pending to it (the
    dcoh.conflict_req bins), and the host classifies the first conflict as intended:
    early: the Req held back 60 cycles on m2s_req, so the BIConflict overtakes it and the Ack
    comes first, and the host's BIRsp held back 120 cycles, so the Req reaches the DCOH while
    the BISnp is outstanding and must wait for it (rule 5); a second, late conflict follows
    when the parked Req wins the line before the device write's re-check.
    late (for the Reqs after which the snoop filter still tracks the line): the Req served
    while s2m_ndr is held, so the Ack queues behind its Cmp (rule 6).
    Answers are checked against the reference and rules 5/6 by the host model and the
    scoreboard, every read against the writes by the value checker."""
    tb = _calm_tb(dut)
    await tb.reset()
    seen = []                   # (line, late) of every BIConflict, as the host classified it

    class _Conflicts:
        def on_conflict(self, c, cycle):
            seen.append((c.line, c.late))
    tb.core.observers.append(_Conflicts())
    idx = 0
    for kind, (setup, can_be_late) in CONFLICT_KINDS.items():
        for late in (False, True) if can_be_late else (False,):
            line = tb.line("table", 400 + idx)
            idx += 1
            await _setup(tb, line, setup)
            if late:
                tb.chans.hold("s2m_ndr", 200)
                t = await tb.host.request(kind, line, wait=False, delay=0)
                await ClockCycles(dut.clk, tb.latency + 40)      # served, Cmp held
            else:
                # the BIRsp held past the Req's arrival: the Req must wait for it (rule 5)
                tb.chans.hold("m2s_birsp", 120)
                t = await tb.host.request(kind, line, wait=False, delay=60)
            w = tb.dev.submit("wr", line, bytes([idx]) * 64)
            await tb.dev.wait(w)
            await tb.host.wait_txn(t)
            got = [x for a, x in seen if a == line]
            assert got and got[0] == late, \
                f"{kind} from {setup}, {'late' if late else 'early'}: conflicts (late?) {got}"
    dut._log.info(f"{idx} conflict cases")
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def device_write_after_device_read_of_same_line(dut):
    """Device RdCur of X (completes), host MemRd(A) of X, device write of X: the write needs a
    BISnpInv and must complete. (The device read port is idle and its payload still holds X;
    a stream's payload means nothing without valid.)"""
    tb = _calm_tb(dut)
    await tb.reset()
    line = tb.line("table", 4)
    await tb.dev.read(line)
    await tb.host.read(line, "own")
    op = await tb.dev.write(line, bytes([0x55]) * 64, timeout=3000)
    assert tb.core.stats["recv_s2m_bisnp"] == 1 and op.err == 0
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def device_write_then_host_ownership_keeps_order(dut):
    """A device write accepted while the snoop filter says I is ordered before a host
    ownership grant that follows it (MemInv(A): no media read to wait on). With the device
    write still queued for the media port (AW stalled), the host stores the whole line and
    writes it back: the media must end with the host's data, not the older device data."""
    tb = _calm_tb(dut, pmem_stall={"aw": 0.8})
    await tb.reset()
    x = tb.line("table", 40)
    ops = [tb.dev.submit("wr", tb.line("table", 100 + i), dev_id=i) for i in range(6)]
    ops.append(tb.dev.submit("wr", x, bytes([0xDD]) * 64, dev_id=7))
    while ops[-1].q is None:
        await ClockCycles(dut.clk, 1)
    t = await tb.host.invalidate(x, own=True)          # Cmp-E, then a full-line store (M)
    host_data = tb.core.lines[x].data
    await tb.host.writeback(x, "I")
    for op in ops:
        await tb.dev.wait(op)
    await tb.drain()
    got = tb.mem_line(x)
    assert got == host_data, (f"media holds {'the device' if got == bytes([0xDD]) * 64 else 'other'}"
                              f" data for line {x:#x} after the host's later store and writeback "
                              f"(device write accepted at {ops[-1].q}, Cmp-E at {t.t_ndr}, "
                              f"device write answered at {ops[-1].t_resp})")
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def nxm_and_refused_regions(dut):
    """Outside HDM: MemData-NXM / Cmp with NXM; log: refused; superblock and slots: only
    MemRd(SnpCur) is served, writes are refused and write nothing; MemSpecRd anywhere is
    dropped; illegal combinations are ILLEGAL_REQ / ILLEGAL_RWD. The host model checks every
    answer against the reference; the scoreboard requires each err pulse."""
    tb = _calm_tb(dut)
    await tb.reset()
    cfg = tb.cfg
    nxm = None
    for base in range(0, 1 << cfg.addr_bits, 1 << 30):
        if cfg.region_of(base) is None:
            nxm = base >> 6
            break
    sb_line = tb.line("superblock")
    slot_line = tb.line("slots", 5)
    log_line = tb.line("log", 9)
    tb.pmem.mem.write(sb_line << 6, bytes(range(64)))
    host = tb.host
    t = await host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_INV,
                       meta_field=MF.META0_STATE, meta_value=MV.A, line=nxm)
    assert t.drs["opcode"] == DR.MEM_DATA_NXM and t.drs_data == NXM_DATA and t.ndr is None
    t = await host.raw("m2s_rwd", opcode=RW.MEM_WR, meta_field=MF.META0_STATE,
                       meta_value=MV.I, line=nxm, data=bytes([1]) * 64)
    assert t.ndr["opcode"] == ND.CMP
    t = await host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_CUR, line=sb_line)
    assert t.drs["opcode"] == DR.MEM_DATA and t.drs_data == bytes(range(64))
    t = await host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_DATA,
                       meta_field=MF.META0_STATE, meta_value=MV.S, line=sb_line)
    assert t.drs["opcode"] == DR.MEM_DATA_NXM
    for line in (sb_line, slot_line, log_line):
        before = tb.mem_line(line)
        t = await host.raw("m2s_rwd", opcode=RW.MEM_WR, meta_field=MF.META0_STATE,
                           meta_value=MV.I, line=line, data=bytes([0xEE]) * 64)
        assert t.ndr["opcode"] == ND.CMP
        t = await host.raw("m2s_rwd", opcode=RW.MEM_WR_PTL, meta_field=MF.NO_OP,
                           line=line, data=bytes([0xEE]) * 64, be=0xFF)
        assert tb.mem_line(line) == before, f"refused write changed line {line:#x}"
    t = await host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_CUR, line=log_line)
    assert t.drs["opcode"] == DR.MEM_DATA_NXM
    t = await host.raw("m2s_req", opcode=RQ.MEM_INV, snp_type=ST.SNP_INV,
                       meta_field=MF.META0_STATE, meta_value=MV.A, line=log_line)
    assert t.ndr["opcode"] == ND.CMP
    # MemSpecRd: dropped everywhere
    for line in (nxm, log_line, tb.line("table", 1)):
        await host.raw("m2s_req", opcode=RQ.MEM_SPEC_RD, line=line, track=False)
    # illegal combinations
    t = await host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_INV,
                       meta_field=MF.META0_STATE, meta_value=MV.S, line=tb.line("table", 2))
    assert t.drs["opcode"] == DR.MEM_DATA_NXM
    t = await host.raw("m2s_req", opcode=0b0111, line=tb.line("table", 2))
    assert t.ndr["opcode"] == ND.CMP
    t = await host.raw("m2s_rwd", opcode=RW.MEM_WR, snp_type=ST.SNP_INV, line=tb.line("table", 2))
    assert t.ndr["opcode"] == ND.CMP
    await tb.finish(expect_proto_errors=None)


@cocotb.test(skip=not MAIN)
async def unknown_and_wrong_birsp(dut):
    """A BIRsp with no BISnp outstanding is BIRSP_TAG and changes nothing; a BIRspS to a
    BISnpInv is BIRSP_KIND (entry freed, SF = S)."""
    tb = _calm_tb(dut)
    await tb.reset()
    tb.core.raw_birsp(BR.BIRSP_I, bi_tag=tb.cfg.bi_tags - 1)
    await ClockCycles(dut.clk, 20)
    await tb.finish(expect_proto_errors=None)
    assert tb.counters()["proto_errors"] >= 1


@cocotb.test(skip=not MAIN)
async def birsp_tags_beyond_the_tracker_are_refused(dut):
    """With a device write's BISnp outstanding on BITag ``t`` (the host answers after 400
    cycles), nine BIRsps for ``t`` with one of bits 3..11 of the 12-bit BITag field set (tags
    the 8-entry tracker does not have) are each BIRSP_TAG, a protocol error, and change
    nothing: the host's real BIRsp then completes the snoop and the write (docs/coherence.md,
    rule 7: a BIRsp whose tag is not outstanding)."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 400
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    await tb.reset()
    line = tb.line("table", 77)
    await tb.host.read(line, "own")
    snoops = BISnpLog(tb)
    op = tb.dev.submit("wr", line, bytes([0x5A]) * 64, dev_id=1)
    await tb.until(lambda: snoops.seen, 200, "the device write's BISnp")
    t = snoops.seen[0][0]
    assert t < tb.cfg.bi_tags <= 8, (t, tb.cfg.bi_tags)
    for k in range(3, 12):
        tb.core.raw_birsp(BR.BIRSP_I, bi_tag=t | 1 << k)
        await ClockCycles(dut.clk, 4)
    assert tb.counters()["proto_errors"] == 9, tb.counters()
    await tb.dev.wait(op, timeout=5_000)
    await tb.finish(expect_proto_errors=9)


@cocotb.test(skip=not MAIN)
async def duplicate_birsp_back_to_back(dut):
    """A host that answers a BISnp twice in consecutive cycles: the first BIRsp frees its
    BITag; the second is BIRSP_TAG and changes nothing, although the host lane's select stage
    takes it while the first is decided (its tag still allocated then). The device write that
    caused the snoop completes."""
    tb = _calm_tb(dut)
    await tb.reset()
    line = tb.line("table", 3)
    await tb.host.read(line, "own")                   # the host holds the line: SF A
    core = tb.core
    enqueue, dup = core._enqueue, []

    def enqueue_twice(channel, payload, what, obj=None, delay=None):
        m = enqueue(channel, payload, what, obj, delay)
        if channel == "m2s_birsp" and what == "birsp" and not dup:
            dup.append(enqueue(channel, payload, "raw_birsp", None, 0))
        return m

    core._enqueue = enqueue_twice
    op = tb.dev.submit("wr", line, dev_id=1)          # BISnpInv, answered BIRspI twice
    await tb.dev.wait(op, timeout=5_000)
    assert dup, "the host never answered a BISnp"
    await ClockCycles(dut.clk, 20)
    assert tb.counters()["proto_errors"] == 1, tb.counters()
    await tb.finish(expect_proto_errors=1)


async def _expect_poison(tb, line, poisoned, data=None):
    """A host MemRd(SnpCur) and a device RdCur of ``line``: MemData poison / device ``err`` ==
    ``poisoned``, the media's bit too (the PMEM model's, an independent model of the rule);
    a good line's data equals ``data`` when given."""
    t = await tb.host.read(line, "cur")
    assert t.drs["poison"] == int(poisoned), f"line {line:#x}: MemData poison {t.drs['poison']}"
    op = await tb.dev.read(line)
    assert op.err == int(poisoned), f"line {line:#x}: device read err {op.err}"
    assert tb.pmem.mem.is_poisoned(line << 6) == poisoned
    if data is not None and not poisoned:
        assert t.drs_data == data and op.resp == data


@cocotb.test(skip=not (MAIN or SMALL))
async def poison(dut):
    """The media keeps poison per line (docs/coherence.md "Poison"): a poisoned MemWr marks
    the line (host reads MemData poison 1, device reads err 1); a partial clean write (host
    MemWrPtl, device write with some byte enables) leaves it poisoned; a full-line clean write
    by the host (MemWr, or MemWrPtl with all byte enables) or the device clears it; a poisoned
    MemWrPtl with a single byte enable poisons the whole line. Every write gets its Cmp and
    lands (no error reported). On the narrow media port (128 bits) each line is 4 beats."""
    tb = _calm_tb(dut)
    await tb.reset()
    line = tb.line("staging", 7)
    await tb.host.write(line, bytes([0x99]) * 64, poison=1)
    await _expect_poison(tb, line, True)
    assert tb.mem_line(line) == bytes([0x99]) * 64        # the poisoned data was written
    await tb.host.write(line, bytes([0x55]) * 64, (1 << 63) - 1)      # MemWrPtl, 63 bytes
    await _expect_poison(tb, line, True)
    await tb.dev.write(line, bytes([0x66]) * 64, (1 << 64) - 2)       # device, 63 bytes
    await _expect_poison(tb, line, True)
    await tb.host.write(line, bytes([0x12]) * 64)                      # MemWr: clears
    await _expect_poison(tb, line, False, bytes([0x12]) * 64)
    await tb.host.write(line, bytes([0x34]) * 64, 1 << 40, poison=1)   # one byte, poisoned
    await _expect_poison(tb, line, True)
    assert tb.mem_line(line) == bytes([0x12]) * 40 + b"\x34" + bytes([0x12]) * 23
    await tb.dev.write(line, bytes([0x77]) * 64)                       # device full line
    await _expect_poison(tb, line, False, bytes([0x77]) * 64)
    other = tb.line("table", 5)
    await tb.host.write(other, bytes([0x21]) * 64, poison=1)
    await tb.host.request("uc_write_ptl", other, data=bytes([0x22]) * 64,
                          be=(1 << 64) - 1)                      # MemWrPtl, all bytes
    await _expect_poison(tb, other, False, bytes([0x22]) * 64)
    await tb.finish()


@cocotb.test(skip=not (MAIN or SMALL))
async def poison_many_lines(dut):
    """20 poisoned lines (more than any table would hold, the DCOH keeps none): every write is
    answered Cmp and written, no error is reported, all 20 read back poisoned, host and device;
    a clean full-line write of every other one clears exactly those."""
    tb = _calm_tb(dut)
    await tb.reset()
    lines = [tb.line("staging" if i % 2 else "table", 200 + i) for i in range(20)]
    for i, a in enumerate(lines):
        await tb.host.write(a, bytes([i + 1]) * 64, poison=1)
    for i, a in enumerate(lines):
        assert tb.mem_line(a) == bytes([i + 1]) * 64, f"poisoned write {i} was not written"
        await _expect_poison(tb, a, True)
    for i, a in enumerate(lines[::2]):
        await tb.host.write(a, bytes([0xC0 + i]) * 64)
    for i, a in enumerate(lines):
        await _expect_poison(tb, a, i % 2 == 1, None if i % 2 else bytes([0xC0 + i // 2]) * 64)
    assert sorted(tb.pmem.mem.poisoned) == sorted(a << 6 for a in lines[1::2])
    await tb.finish()


class _AwUser:
    """The AWUSER (poison) bit of every media write burst, by line in order (sampled once per
    burst when its valid rises, as DcohTB's media monitor samples AW)."""

    def __init__(self, tb):
        d = tb.dut
        self._get = [fast_getter(x) for x in (d.m_axi__awvalid, d.m_axi__awready,
                                              d.m_axi__awaddr, d.m_axi__awuser)]
        self._busy = False
        self.by_line: dict[int, list] = {}
        tb.chans.every_cycle.append(self)

    def __call__(self, cycle):
        valid, ready, addr, user = self._get
        if valid() == "1":
            if not self._busy:
                self.by_line.setdefault(int(addr(), 2) >> 6, []).append(int(user(), 2))
            self._busy = ready() != "1"
        else:
            self._busy = False


# How the host comes to send each poisoned write kind: ("uc", Meta) an uncached write from I
# (Meta0 I or No-Op); ("wb", keep) the writeback of a line it read poisoned and stored part of
# (keep I: Meta0 I, E: Meta0 A, S: Meta0 S, noop: No-Op); each as MemWr and as MemWrPtl
POISON_CASES = (("uc", "I"), ("uc", "noop"), ("wb", "I"), ("wb", "E"), ("wb", "S"),
                ("wb", "noop"))


def _partial_be(r):
    return (r.getrandbits(64) & ~(1 << r.randrange(64))) or 1


@cocotb.test(skip=not (MAIN or SMALL))
async def poisoned_write_of_each_kind(dut):
    """Every host write kind with poison, MemWr and MemWrPtl × Meta0 I, A, S and No-Op (the
    dcoh.rwd poison bins, all 8 sent): each is answered Cmp as the reference says (host model)
    with no err pulse (scoreboard), its media burst carries AWUSER 1 (one burst per host
    write), its bytes land, and the line then reads poisoned (host MemData poison 1, device
    read err 1, the PMEM model's bit, the value checker's rule) until a full-line clean device
    write clears it. A writeback carries poison because the host read the line poisoned (after
    an uncached poisoned MemWr) and stored only part of it, as a cache keeps a poisoned line."""
    tb = _calm_tb(dut)
    await tb.reset()
    aw = _AwUser(tb)
    r = tb.core.rng
    sent = set()
    for i, ((how, meta), full) in enumerate(itertools.product(POISON_CASES, (True, False))):
        line = tb.line("staging" if i % 2 else "table", 300 + i)
        if how == "uc":
            data, be = r.randbytes(64), ALL_BE if full else _partial_be(r)
            old = tb.mem_line(line)
            want = bytes(data[k] if be >> k & 1 else old[k] for k in range(64))
            t = await tb.host.write(line, data, be, meta=meta, poison=1)
            n_wr = 1
        else:
            await tb.host.write(line, r.randbytes(64), poison=1)
            rd = await tb.host.read(line, "own")
            assert rd.drs["poison"] == 1 and tb.core.lines[line].poison
            tb.host.store(line, r.randbytes(64), _partial_be(r))
            ln = tb.core.lines[line]
            want = ln.data
            t = await tb.host.writeback(line, meta, be=ALL_BE if full else ln.dirty)
            n_wr = 2
            if tb.core.state(line) != "I":
                await tb.host.evict(line)                       # MemClnEvct
        h = t.payload["hdr"]
        label = fcov.rwd_combo(h["opcode"], h["meta_field"], h["meta_value"], h["poison"])
        case = f"{how}/{meta}/{'full' if full else 'partial'} ({label}, line {line:#x})"
        assert h["poison"] == 1 and (h["opcode"] == RW.MEM_WR) == full, case
        sent.add(label)
        assert t.ndr["opcode"] == ND.CMP, case
        assert aw.by_line.get(line) == [1] * n_wr, f"{case}: media AWUSER {aw.by_line.get(line)}"
        assert tb.mem_line(line) == want, f"{case}: media data"
        await _expect_poison(tb, line, True)
        clean = r.randbytes(64)
        await tb.dev.write(line, clean)
        assert aw.by_line[line][-1] == 0, f"{case}: device write with AWUSER 1"
        await _expect_poison(tb, line, False, clean)
    assert sent == {b for b in fcov.bins()["dcoh.rwd"] if b.endswith("poison1")}, sent
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def partial_writes(dut):
    """MemWrPtl from I with sparse byte enables, device partial writes in between, host
    partial stores written back with MemWrPtl: the value checker sees every byte."""
    tb = _calm_tb(dut)
    await tb.reset()
    line = tb.line("table", 11)
    r = tb.core.rng
    for i in range(12):
        be = r.getrandbits(64) or 1
        await tb.host.write(line, r.randbytes(64), be)
        await tb.dev.write(line, r.randbytes(64), r.getrandbits(64) or 2)
        op = await tb.dev.read(line)
        t = await tb.host.read(line, "own")
        assert t.drs_data == op.resp, "host and device read different data with no write between"
        tb.host.store(line, r.randbytes(64), r.getrandbits(64) or 4)
        t = await tb.host.writeback(line, "I", be=tb.core.lines[line].dirty)
        assert t.payload["hdr"]["opcode"] in (RW.MEM_WR, RW.MEM_WR_PTL)
    await tb.finish()


@cocotb.test(skip=not SMALL)
async def victim_of_full_set_is_written_back(dut):
    """2 sets x 2 ways: the host owns and dirties two lines of set 0, then asks for a third;
    the DCOH back-invalidates a victim (BISnpInv), the host writes it back and answers BIRspI,
    and only then is the third line granted. The victim's data is in memory."""
    tb = _calm_tb(dut)
    await tb.reset()
    s = tb.cfg.sf_sets
    a, b, c = (tb.line("table", s * k) for k in (1, 2, 3))   # all in set 0
    for x, v in ((a, 0xA1), (b, 0xB2)):
        await tb.host.read(x, "own")
        tb.host.store(x, bytes([v]) * 64)
    t = await tb.host.read(c, "own")
    assert t.grant == "E"
    assert tb.core.stats["recv_s2m_bisnp"] == 1 and tb.core.stats["snoop_writebacks"] == 1
    victim = a if tb.core.state(a) == "I" else b
    assert tb.core.state(victim) == "I"
    op = await tb.dev.read(victim)
    assert op.resp == bytes([0xA1 if victim == a else 0xB2]) * 64
    await tb.finish()


@cocotb.test(skip=not SMALL)
async def victim_snoop_does_not_block_other_requests(dut):
    """Rule 8: a Req waiting for a victim's BIRsp parks; Reqs to other sets are served while
    the host takes its time (200 cycles) to answer the victim BISnp."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 200
    tb = _calm_tb(dut, knobs=knobs)
    await tb.reset()
    s = tb.cfg.sf_sets
    for k in (1, 2):
        await tb.host.read(tb.line("table", s * k), "own")          # set 0 full
    parked = tb.core.issue("rd_own", tb.line("table", s * 3))        # needs a victim
    await ClockCycles(dut.clk, 10)
    others = [await tb.host.read(tb.line("table", s * k + 1), "shared") for k in (1, 2)]
    await tb.host.wait_txn(parked)
    snoops = [sn for sn in tb.core.open_bitags.values()]
    assert not snoops
    assert all(t.t_done < parked.t_done for t in others), \
        f"set-1 requests done at {[t.t_done for t in others]}, parked one at {parked.t_done}"
    assert parked.t_done - parked.t_sent > 200, "the parked request did not wait for the victim"
    await tb.finish()


@cocotb.test(skip=not SMALL)
async def tracker_full(dut):
    """More snoops wanted than BITags while the host is slow to answer (up to 150 cycles): a
    device write, a device RdOwn and two host requests that need victims, all at once. At most
    bi_tags BISnps are outstanding (rule 7 checks each), the tracker does fill, and every
    request completes."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_max = 150
    tb = _calm_tb(dut, knobs=knobs)
    await tb.reset()
    s = tb.cfg.sf_sets
    held = [tb.line("table", i) for i in range(s * tb.cfg.sf_ways)]   # fills the snoop filter
    for x in held:
        await tb.host.read(x, "own")
    ops = [tb.dev.submit("wr", held[0], dev_id=1), tb.dev.submit("rd_own", held[1], dev_id=2)]
    txns = [tb.core.issue("rd_own", tb.line("table", 64 * s + k)) for k in range(2)]
    for op in ops:
        await tb.dev.wait(op, timeout=50_000)
    for t in txns:
        await tb.host.wait_txn(t, timeout=50_000)
    assert tb.core.stats["max_open_bisnp"] == tb.cfg.bi_tags, tb.core.stats
    await tb.finish()


@cocotb.test(skip=not SMALL)
@cocotb.parametrize(stall=[0.0, 0.3])
async def random_small_sf(dut, stall):
    """Random host + device traffic on 12 lines over a 2x2 snoop filter: constant victims."""
    tb = DcohTB(dut, host_stall=stall, dev_stall=stall, pmem_stall=stall / 2)
    await tb.reset()
    lines = [tb.line("table", i) for i in range(12)]
    tb.dev.start_random(300, lines, p=0.05)
    await tb.host.run_random(P.messages or 1500, lines)
    s = await tb.finish()
    dut._log.info(f"summary {s}")


@cocotb.test(skip=not MAIN)
@cocotb.parametrize(stall=[0.0, 0.3], conflict_tag=["fresh", "req"])
async def random_stress(dut, stall, conflict_tag):
    """Seeded random host traffic (every legal kind, loads/stores, silent drops, adversarial
    channel delays) and device reads/writes on 16 hot lines."""
    knobs = HostKnobs(conflict_tag=conflict_tag)
    tb = DcohTB(dut, host_stall=stall, dev_stall=stall, pmem_stall=stall / 2, knobs=knobs)
    await tb.reset()
    lines = [tb.line("table", i * 3) for i in range(12)] + \
        [tb.line("staging", i) for i in range(4)]
    n = P.messages or 2500
    tb.dev.start_random(n // 5, lines, p=0.08)
    await tb.host.run_random(n, lines)
    s = await tb.finish()
    dut._log.info(f"summary {s}")
    assert s["conflicts"] > 0 or n < 1000


@cocotb.test(skip=not MAIN)
async def random_lines_across_the_regions(dut):
    """Seeded random host traffic and device reads/writes on 48 lines drawn from the whole
    table region and 16 from the whole staging region, so every line bit of the coherent
    regions moves in the snoop filter's tags, the BITag lines and the media addresses (the
    other random tests use lines at the regions' starts); zero violations."""
    tb = DcohTB(dut, host_stall=0.2, dev_stall=0.2, pmem_stall=0.1)
    await tb.reset()
    cfg = tb.cfg
    lines = sorted({tb.line("table", random.randrange(cfg.table_size >> 6)) for _ in range(48)}
                   | {tb.line("staging", random.randrange(cfg.staging_size >> 6))
                      for _ in range(16)})
    n = P.messages or 1500
    tb.dev.start_random(n // 5, lines, p=0.08)
    await tb.host.run_random(n, lines)
    s = await tb.finish()
    dut._log.info(f"summary {s}")


class _DrsOrder:
    """Every DRS as the host receives it: (cycle, opcode), in order."""

    def __init__(self):
        self.seen = []

    def on_s2m(self, channel, msg, cycle, txn):
        if channel == "s2m_drs":
            self.seen.append((cycle, msg["hdr"]["opcode"]))


@cocotb.test(skip=not MAIN)
async def random_full_sets_across_the_regions(dut):
    """Seeded random host traffic and device reads/writes on six lines in each of 12 snoop
    filter sets (8 of the table region, 4 of staging), each line's upper bits drawn from its
    whole region: every way of those sets holds such lines in turn, and the victims, BISnps,
    BIRsps and parked Reqs carry them (``random_lines_across_the_regions`` spreads its lines
    over the sets, so mostly way 0 sees them); zero violations."""
    tb = DcohTB(dut, host_stall=0.2, dev_stall=0.2, pmem_stall=0.1)
    await tb.reset()
    cfg = tb.cfg
    set_bits = cfg.sf_sets.bit_length() - 1
    lines = []
    sets = random.sample(range(cfg.sf_sets), 12)
    for region, chosen in (("table", sets[:8]), ("staging", sets[8:])):
        size_lines = getattr(cfg, region + "_size") >> 6
        for st in chosen:
            his = random.sample(range(size_lines >> set_bits), 6)
            lines += [tb.line(region, hi << set_bits | st) for hi in his]
    lines.sort()
    n = P.messages or 1500
    tb.dev.start_random(n // 5, lines, p=0.08)
    await tb.host.run_random(n, lines)
    s = await tb.finish()
    dut._log.info(f"summary {s}")


@cocotb.test(skip=not MAIN)
async def drs_alternates_memdata_and_nxm_while_both_wait(dut):
    """The DRS channel's round-robin merge (hw/dcoh/merge.py): with media MemData and
    MemData-NXM answers both waiting behind a held s2m_drs, the first six DRS after the hold
    alternate the two kinds (neither goes twice in a row while the other waits)."""
    tb = _calm_tb(dut)
    await tb.reset()
    order = _DrsOrder()
    tb.core.observers.append(order)
    nxm = next(b >> 6 for b in range(0, 1 << tb.cfg.addr_bits, 1 << 30)
               if tb.cfg.region_of(b) is None)
    tb.chans.hold("s2m_drs", 300)
    txns = [await tb.host.read(tb.line("table", 500 + i), "cur", wait=False) for i in range(8)]
    txns += [await tb.host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_CUR,
                               line=nxm + i, wait=False) for i in range(8)]
    for t in txns:
        await tb.host.wait_txn(t, timeout=5000)
    assert all(t.t_sent < txns[0].t_drs for t in txns[:11]), "raise the hold"
    kinds = ["N" if op == DR.MEM_DATA_NXM else "M" for _, op in order.seen]
    first = "".join(kinds[:6])
    assert first in ("MNMNMN", "NMNMNM"), f"DRS order after the hold {''.join(kinds)}"
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def device_reads_snoop_host_owned_lines_in_every_way(dut):
    """All four ways of one snoop-filter set hold lines the host owns and has stored to (M):
    a device RdCur of each sends one BISnpData and returns the host's data (the value checker
    and the scoreboard check it too), whichever way the line sits in."""
    tb = _calm_tb(dut)
    await tb.reset()
    s = tb.cfg.sf_sets
    lines = [tb.line("table", 20 + s * k) for k in range(tb.cfg.sf_ways)]
    data = {}
    for k, x in enumerate(lines):
        await tb.host.read(x, "own")
        data[x] = bytes([0x40 + k]) * 64
        tb.host.store(x, data[x])
    for x in lines:
        n0 = tb.core.stats["recv_s2m_bisnp"]
        op = await tb.dev.read(x)
        assert tb.core.stats["recv_s2m_bisnp"] == n0 + 1, f"no BISnp for line {x:#x}"
        assert op.resp == data[x], f"device read of line {x:#x} did not return the host's data"
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def host_read_waits_for_the_host_write_before_it(dut):
    """Media ordering (docs/coherence.md): a MemWr and, right behind it, a MemRd(SnpCur) of the
    same line, sent without waiting for the Cmp while the media's AW channel stalls: the read
    returns the written data, never the older media contents."""
    tb = _calm_tb(dut, pmem_stall={"aw": 0.9})
    await tb.reset()
    r = tb.core.rng
    for i in range(4):
        line = tb.line("table", 600 + i)
        data = r.randbytes(64)
        w = await tb.host.raw("m2s_rwd", opcode=RW.MEM_WR, meta_field=MF.META0_STATE,
                              meta_value=MV.I, line=line, data=data, wait=False)
        t = await tb.host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_CUR, line=line,
                              wait=False)
        await tb.host.wait_txn(w)
        await tb.host.wait_txn(t)
        assert t.drs_data == data, (f"line {line:#x}: the read sent after the write returned "
                                    f"{'zeros' if t.drs_data == bytes(64) else 'other data'}")
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def host_write_is_not_held_back_by_a_stream_of_device_writes(dut):
    """The write queue takes a host write first and gives a device write that lost the slot
    the next cycle (one cycle, not more): a host MemWr sent while 60 device writes stream into
    the queue is accepted before the last of them."""
    tb = _calm_tb(dut)
    await tb.reset()
    ops = [tb.dev.submit("wr", tb.line("table", 800 + i), dev_id=i % 15) for i in range(60)]
    while ops[5].q is None:
        await ClockCycles(dut.clk, 1)
    w = await tb.host.write(tb.line("table", 900), bytes([0x90]) * 64, wait=False)
    for op in ops:
        await tb.dev.wait(op)
    await tb.host.wait_txn(w)
    assert w.t_sent < ops[-1].q, (f"host MemWr accepted at {w.t_sent}, device writes "
                                  f"accepted from {ops[0].q} to {ops[-1].q}")
    await tb.finish()


@cocotb.test(skip=not MAIN)
async def warm_reset_clears_every_snoop_filter_set(dut):
    """A reset while running (not only at power-up) sweeps every snoop-filter set back to I:
    one line per set granted S and silently dropped by the host (the snoop filter still says
    S), then reset; afterwards a device write to each of those lines goes to the media without
    a BISnp. (No BISnp before the reset: the DUT's counters restart from 0 with it.)"""
    tb = _calm_tb(dut)
    await tb.reset()
    lines = [tb.line("table", 1000 + i) for i in range(tb.cfg.sf_sets)]
    for x in lines:
        await tb.host.read(x, "shared")
        tb.core.silent_drop(x)
    await tb.drain()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    for _ in range(10_000):
        await ClockCycles(dut.clk, 1)
        if dut.ready.value:
            break
    n0 = tb.core.stats["recv_s2m_bisnp"]
    for x in lines:
        await tb.dev.write(x, bytes([x & 0xFF]) * 64)
    got = tb.core.stats["recv_s2m_bisnp"] - n0
    assert got == 0, f"{got} BISnps for lines whose set the reset should have cleared"
    await tb.finish()


# ---- pytest launcher ----------------------------------------------------------------------------
CONFIGS = {
    "main": DeviceConfig(),
    # victims and a full tracker; a 128-bit media port (the fpga-ecp5 width, a line is a
    # 4-beat burst) for the poison tests on multi-beat lines
    "small": DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2,
                                  media_data_bits=128),
}


@pytest.fixture(scope="session", params=sorted(CONFIGS))
def dcoh_build(request):
    cfg = CONFIGS[request.param]
    return request.param, cfg, dcoh_top_build(cfg)


@pytest.mark.cosim
def test_dcoh_cosim(dcoh_build, seed, tmp_path):
    """All DCOH cocotb tests of the configuration's set pass with zero violations."""
    name, cfg, b = dcoh_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=DcohParams(bench=BenchConfig(cfg), set=name, messages=1500))
    # every test of the set ran (none skipped): main 24 with its parametrizations, small 5 +
    # the 3 poison tests
    assert res.n_ran >= {"main": 26, "small": 8}[name], res
