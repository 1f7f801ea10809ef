"""cocotb bench: a small deterministic LOOKUP workload, recorded at the device boundary.

Run by tests/cosim/test_icarus.py on Verilator and on Icarus with the same seed; the two trace
files must be identical (docs/simulators.md). Each test also checks every command against the
golden model exactly as ``GatherTB.check`` does (completion and whole memory image), checks that
no device output is X/Z after reset (the Icarus ``-g2012`` trap, docs/conventions.md), and that
the recorder saw as many transactions per channel as the PMEM model and the stream agents
handled (so the monitor misses nothing).

Environment: ``TCXL_CONFIG`` (DeviceConfig JSON), ``TCXL_TRACE_OUT`` (file to write; each test
writes a section starting with a ``{"test": ..., "seed": ...}`` line, the first test of a launch
truncates the file). The workload is small on purpose: Icarus runs about 6 k cycles/s.
"""
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from cosim.tb_gather import GatherTB
from hw.encodings import LookupError_ as E
from hw.lookup_slice import LookupSlice

# (stall probability, PMEM latency): plain; stalls from the PMEM model's seeded generators on
# every AXI channel (and pauses on cmd/cpl); stalls with latency 1 (back-to-back responses)
VARIANTS = [(0.0, 16), (0.3, 16), (0.3, 1)]
# (dim, n_bags, pooling): a few bags each, every supported dim once (pooling is the mean bag
# length of uniform lengths 0..2*pooling, so empty bags occur)
JOBS = [(16, 10, 5), (64, 6, 4), (32, 8, 3), (128, 3, 3)]

_sections_written = 0


def output_ports(cfg):
    """Verilog names of the device's outputs, from the hardware's own signature."""
    sig = LookupSlice(cfg).signature
    return ["__".join(map(str, path)) for path, member in sig.members.flatten()
            if member.is_port and member.flow.name == "Out"]


def assert_outputs_defined(dut, names, when):
    bad = {}
    for name in names:
        value = str(getattr(dut, name).value)
        if any(c not in "01" for c in value):
            bad[name] = value if len(value) <= 16 else value[:16] + "..."
    assert not bad, f"device outputs with X/Z {when}: {bad}"


def _write_section(tb, name):
    global _sections_written
    path = os.environ.get("TCXL_TRACE_OUT")
    if not path:
        return
    tb.trace.write(path, append=_sections_written > 0, header={"test": name, "seed": tb.seed})
    _sections_written += 1
    tb.dut._log.info(f"trace: {len(tb.trace.records)} transactions {tb.trace.counts} "
                     f"(monitor slept {tb.trace.sleeps} times) -> {path}")


@cocotb.test()
@cocotb.parametrize((("stall", "latency"), VARIANTS))
async def trace_lookup_workload(dut, stall, latency):
    """Four good LOOKUPs (dims 16/64/32/128) and one INDEX_RANGE error, golden-checked, traced;
    with ``stall`` the PMEM model's seeded stall generators pause every AXI channel and the
    cmd/cpl agents pause too."""
    tb = GatherTB(dut, latency=latency, stall=stall, trace=True)
    outputs = output_ports(tb.cfg)
    await tb.reset()
    assert_outputs_defined(dut, outputs, "after reset")

    n_cmds = 0
    for tag, (dim, n_bags, pooling) in enumerate(JOBS):
        job = tb.random_job(rows=40, dim=dim, n_bags=n_bags, pooling=pooling, alpha=0.8,
                            extreme=0.2, tag=tag)
        await tb.check(job.cmd, E.OK)
        n_cmds += 1

    # error case: bag 1 holds an index == rows; bag 0 is written, then the error completion
    rng = np.random.default_rng(tb.seed)
    rows = 10
    table = rng.integers(-2**20, 2**20, size=(rows, 16)).astype(np.int32)
    bad = tb.job(table, np.array([0, 2, 4, 5], np.uint32),
                 np.array([1, 2, 3, rows, 4], np.uint32), tag=7).cmd
    cpl = await tb.check(bad, E.INDEX_RANGE)
    assert cpl.err_bag == 1, f"error in bag {cpl.err_bag}, expected bag 1"
    n_cmds += 1

    # let stray traffic (there should be none) reach the trace, then compare counts
    await ClockCycles(dut.clk, 4 * latency + 16)
    assert_outputs_defined(dut, outputs, "after the workload")
    tb.trace.stop()
    seen = tb.trace.counts
    pm = tb.pmem
    expect = {"cmd": n_cmds, "cpl": n_cmds, "ar": pm.ar_count, "r": pm.r_beats,
              "aw": pm.aw_count, "w": pm.w_beats, "b": pm.b_count}
    assert seen == expect, f"recorder counts {seen} != bench counts {expect}"
    assert all(seen.values()), f"a channel carried nothing: {seen}"
    _write_section(tb, f"trace_lookup_workload[stall={stall},latency={latency}]")
