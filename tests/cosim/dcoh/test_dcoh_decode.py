"""Host addresses above the device's address width are outside HDM, bit by bit.

The 46-bit line address of a Req or RwD header is wider than the device's ``addr_bits - 6``
line bits; a message with any bit above them set must get the outside-HDM answer (MemData-NXM
for a read, Cmp and no write for a write), never reach the line it aliases to. The DCOH bench
sent only addresses inside the width, and mutation testing (docs/verification.md "Mutation
testing: hw") found a mutant that ignores one of those bits on the RwD channel surviving it.
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


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.mark.cosim
def test_dcoh_decode_cosim(seed, tmp_path):
    """Addresses above the device's width, one bit at a time, on Req and RwD."""
    cfg = DeviceConfig()
    b = dcoh_top_build(cfg)
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran == 1 and res.n_failed == 0
