"""Host addresses above the device's address width are outside HDM, bit by bit; reserved
header encodings are illegal.

The 46-bit line address of a Req or RwD header is wider than the device's ``addr_bits - 6``
line bits; a message with any bit above them set must get the outside-HDM answer (MemData-NXM
for a read, Cmp and no write for a write), never reach the line it aliases to. The DCOH bench
sent only addresses inside the width, and mutation testing (docs/verification.md "Mutation
testing: hw") found a mutant that ignores one of those bits on the RwD channel surviving it. Likewise the
reserved MetaValue (0b01) and the reserved RwD opcodes were never sent; mutants that take them
for a legal encoding survived.
"""
import cocotb
import pytest

from cosim import build as cb
from cosim.cxl_host import HostKnobs
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import DcohTB, dcoh_top_build
from hw.config import DeviceConfig
from hw.cxl_encodings import (DRSOpcode as DR, MetaField as MF, MetaValue as MV,
                              NDROpcode as ND, ReqOpcode as RQ, RwDOpcode as RW, SnpType as ST)

ADDR_FIELD = 46          # line-address bits of an M2S Req/RwD header (hw/cxl_encodings.py)


@cocotb.test()
async def addresses_above_the_device_width_are_outside_hdm(dut):
    """For every header address bit above the device's line bits: MemRd(SnpCur) answers
    MemData-NXM, MemWr answers Cmp and leaves the aliased line as it was."""
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=HostKnobs.calm())
    await tb.reset()
    lb = tb.cfg.addr_bits - 6
    alias = tb.line("table", 11)
    tb.pmem.mem.write(alias << 6, bytes(range(64)))
    for b in range(lb, ADDR_FIELD):
        line = alias | 1 << b
        t = await tb.host.raw("m2s_req", opcode=RQ.MEM_RD, snp_type=ST.SNP_CUR, line=line)
        assert t.drs["opcode"] == DR.MEM_DATA_NXM, (b, t.drs)
        t = await tb.host.raw("m2s_rwd", opcode=RW.MEM_WR, meta_field=MF.META0_STATE,
                              meta_value=MV.I, line=line, data=bytes([0xA5]) * 64)
        assert t.ndr["opcode"] == ND.CMP, (b, t.ndr)
        assert tb.mem_line(alias) == bytes(range(64)), f"write to bit {b} reached line {alias:#x}"
    await tb.finish(expect_proto_errors=None)


RESERVED_META_VALUE = 0b01   # MetaValue: I 0b00, A 0b10, S 0b11


@cocotb.test()
async def reserved_encodings_are_illegal(dut):
    """MemRd SnpData / MemInv SnpInv / MemClnEvct with Meta0-State and the reserved MetaValue
    are ILLEGAL_REQ (MemData-NXM for the read, Cmp for the others); each reserved RwD opcode
    (every 4-bit value but MemWr, MemWrPtl and BIConflict) is ILLEGAL_RWD, answered Cmp, not
    BIConflictAck, and writes nothing. The host model checks each answer against the
    reference, the scoreboard each err pulse; the DUT counts one protocol error for each."""
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=HostKnobs.calm())
    await tb.reset()
    line = tb.line("table", 12)
    tb.pmem.mem.write(line << 6, bytes(range(64)))
    n = 0
    for op, snp in ((RQ.MEM_RD, ST.SNP_DATA), (RQ.MEM_RD, ST.SNP_INV), (RQ.MEM_INV, ST.SNP_INV),
                    (RQ.MEM_CLN_EVCT, ST.NO_OP)):
        t = await tb.host.raw("m2s_req", opcode=op, snp_type=snp, meta_field=MF.META0_STATE,
                              meta_value=RESERVED_META_VALUE, line=line)
        if op == RQ.MEM_RD:
            assert t.drs["opcode"] == DR.MEM_DATA_NXM, (op, snp, t.drs)
        else:
            assert t.ndr["opcode"] == ND.CMP, (op, snp, t.ndr)
        n += 1
    legal = {int(RW.MEM_WR), int(RW.MEM_WR_PTL), int(RW.BI_CONFLICT)}
    for op in sorted(set(range(16)) - legal):
        t = await tb.host.raw("m2s_rwd", opcode=op, line=line, data=bytes([0xA5]) * 64)
        assert t.ndr["opcode"] == ND.CMP, (op, t.ndr)
        assert tb.mem_line(line) == bytes(range(64)), f"RwD opcode {op:#06b} wrote the line"
        n += 1
    await tb.finish(expect_proto_errors=n)


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.mark.cosim
def test_dcoh_decode_cosim(seed, tmp_path):
    """Addresses above the device's width, one bit at a time, on Req and RwD; reserved
    encodings."""
    cfg = DeviceConfig()
    b = dcoh_top_build(cfg)
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran == 2 and res.n_failed == 0
