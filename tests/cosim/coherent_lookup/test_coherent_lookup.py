"""LOOKUP through the DCOH with a caching host (device top, cocotb).

The host (cosim.cxl_host, MESI per line, checked against sw_model.coherence) holds the command's
offsets and index lists **dirty** in its cache: the media copy of those lines is overwritten
with garbage after the host took ownership, so the only correct copy is the host's. It also
holds the output lines **shared** from before the command. The LOOKUP is correct only if the
DCOH snoops the host before the device reads (BISnpData: the host writes the dirty lines back
first) and before the device writes (BISnpInv: the host drops its stale copies). Checked:
completion and the whole memory image equal the golden model (run on the true lists), every
list and output line was snooped, the host's output copies are gone, and host reads after the
command return the pooled outputs. Variants: a calm host, and an adversarial one (random
channel delays and ready gaps).

Pytest launcher (end of file): LOOKUP through the DCOH with a caching host that holds the lists dirty and the outputs shared
(above): result and memory image equal the golden model.
"""
import random

import cocotb
import numpy as np
import pytest

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.cxl_host import CxlHost, HostCore, HostKnobs, Reference
from cosim.tb.gather import GatherTB
from hw.config import DeviceConfig
from hw.testtops.lookup_slice import SLICE_NAME, LookupSlice
from sw_model.device import DeviceModel

LINE = 64


def _lines(addr, nbytes):
    return range(addr // LINE, (addr + nbytes + LINE - 1) // LINE)


@cocotb.test()
@cocotb.parametrize(host=["calm", "adversarial"])
async def lookup_reads_dirty_host_lists_and_invalidates_host_outputs(dut, host):
    """Index lists only in the host's cache (M), outputs cached S by the host: the LOOKUP result
    and the memory image equal the model; host copies of the outputs were invalidated."""
    tb = GatherTB(dut, latency=30)
    await tb.reset()
    cfg = tb.cfg
    knobs = HostKnobs.calm() if host == "calm" else HostKnobs()
    # no value checker here: the device's own writes are checked against the golden model's
    # memory image instead (the checker would need them reported as writes)
    core = HostCore(cfg, seed=tb.seed, knobs=knobs, reference=Reference(cfg), strict=True)
    stall = 0.0 if host == "calm" else 0.2
    h = CxlHost(dut, core, clock=dut.clk, reset=dut.rst, stall=stall)
    job = tb.random_job(rows=300, dim=32, n_bags=48, pooling=7)
    cmd = job.cmd
    # golden model on the true lists, before the media copy is spoiled
    gold = tb.mem.copy()
    want = DeviceModel(cfg, gold).lookup(cmd)

    list_lines = sorted(set(_lines(cmd.offsets_addr, 4 * (cmd.n_bags + 1))) |
                        set(_lines(cmd.indices_addr, 4 * len(job.indices))))
    out_lines = list(_lines(cmd.out_addr, 4 * cmd.n_bags * cmd.dim))
    garbage = random.Random(tb.seed)
    for ln in list_lines:
        t = await h.read(ln, "own")                     # E, with the true contents
        true = bytes(t.drs_data)
        tb.mem.write(ln * LINE, garbage.randbytes(LINE))  # media copy spoiled
        h.store(ln, true)                                # only the host has it now (M)
        assert core.state(ln) == "M"
    for ln in out_lines:
        await h.read(ln, "shared")
        assert core.state(ln) == "S"
    snoops0 = core.stats["recv_s2m_bisnp"]

    got = await tb.run_rtl(cmd)
    await h.drain()
    assert not want.mismatches(got), f"completion differs: {want.mismatches(got)}"
    snooped = core.stats["recv_s2m_bisnp"] - snoops0
    # every list line (held M) and every output line (held S) needed a BISnp
    assert snooped >= len(list_lines) + len(out_lines), (snooped, len(list_lines), len(out_lines))
    for ln in out_lines:
        assert core.state(ln) == "I", f"host still holds output line {ln:#x} ({core.state(ln)})"
    for ln in list_lines:
        assert core.state(ln) in "SI", f"list line {ln:#x} still {core.state(ln)} after BISnpData"
    diff = gold.diff(tb.mem, limit=8)
    assert not diff, f"memory image differs from the model: {diff}"
    # the host reads the pooled outputs coherently
    expect = np.asarray(want_out(job, gold)).view(np.uint8).tobytes()
    for k, ln in enumerate(out_lines):
        t = await h.read(ln, "shared")
        assert bytes(t.drs_data) == expect[k * LINE:(k + 1) * LINE], f"output line {ln:#x}"
    await h.drain()
    assert not core.violations, core.violations[:5]
    dut._log.info(f"{host}: {len(list_lines)} list lines (M), {len(out_lines)} output lines (S), "
                  f"{snooped} BISnps, conflicts {int(dut.conflicts.value)}")


def want_out(job, gold):
    return job.read_output(gold).astype(np.int32)


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.mark.cosim
def test_coherent_lookup_cosim(seed, tmp_path):
    cfg = DeviceConfig()
    b = cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg))
    assert res.n_ran == 2 and res.n_failed == 0
