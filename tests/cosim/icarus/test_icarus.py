"""cocotb bench: a small deterministic LOOKUP workload, recorded at the device boundary.

Run on Verilator and on Icarus with the same seed; the two trace files must be identical (docs/simulators.md). Each test also checks every command against the
golden model exactly as ``GatherTB.check`` does (completion and whole memory image), checks that
no device output is X/Z after reset (the Icarus ``-g2012`` trap, docs/conventions.md), and that
the recorder saw as many transactions per channel as the PMEM model and the stream agents
handled (so the monitor misses nothing).

Run parameters (:class:`TraceParams`): the bench configuration and the trace file to write
(each test writes a section starting with a ``{"test": ..., "seed": ...}`` line, the first test
of a launch truncates the file). The workload is small on purpose: Icarus runs about 6 k cycles/s.

Pytest launcher (end of file): Second simulator: Icarus Verilog and Verilator record identical boundary traces.

The device (default configuration, the same Verilog for both simulators, so the Verilator build
is shared with tests/cosim/gather) runs the cocotb tests above with the same seed on each simulator;
every transaction on cmd/cpl and the AXI media port, with its cycle, must be identical line for
line. Two simulators with different scheduling and 2-state vs 4-state semantics agreeing on
every handshake rules out testbench races and X-dependent RTL behaviour on this workload.

Skipped when Icarus (``iverilog``, ``vvp``) is not installed, unless pytest is given
``--require-icarus`` (``make test-icarus``), which turns the skip into a failure. The trace-sensitivity test needs
only Verilator and always runs.
"""
import time
from dataclasses import dataclass

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb, params
from cosim.tb.config import BenchConfig
from cosim.tb.gather import GatherTB
from cosim.trace.boundary import first_difference
from hw.config import DeviceConfig
from hw.encodings import LookupErrorCode as E
from hw.testtops.lookup_slice import SLICE_NAME, LookupSlice

# (stall probability, PMEM latency): plain; stalls from the PMEM model's seeded generators on
# every AXI channel (and pauses on cmd/cpl); stalls with latency 1 (back-to-back responses)
VARIANTS = [(0.0, 16), (0.3, 16), (0.3, 1)]
# (dim, n_bags, pooling): a few bags each, every supported dim once (pooling is the mean bag
# length of uniform lengths 0..2*pooling, so empty bags occur)
JOBS = [(16, 10, 5), (64, 6, 4), (32, 8, 3), (128, 3, 3)]



@dataclass(frozen=True)
class TraceParams:
    bench: BenchConfig = BenchConfig()
    trace_out: str | None = None       # trace file to write (None: record without writing)


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
    path = params.current(TraceParams).trace_out
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


# ---- pytest launcher ----------------------------------------------------------------------------
CFG = DeviceConfig()
TRACE_CHANNELS = ("cmd", "cpl", "ar", "r", "aw", "w", "b")


def _require_icarus(config):
    reason = cb.icarus_missing()
    if reason is None:
        return
    if config.getoption("--require-icarus"):
        pytest.fail(f"--require-icarus but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """``traces(sim, seed) -> list of trace lines``, each (sim, seed) simulated once per module."""
    verilog = cb.generate_verilog(LookupSlice(CFG), name=SLICE_NAME)
    cache = {}

    def get(sim, seed):
        if (sim, seed) not in cache:
            t0 = time.monotonic()
            b = cb.build(verilog, sim=sim, top=SLICE_NAME)
            t1 = time.monotonic()
            out = tmp_path_factory.mktemp(f"trace-{sim}-{seed}")
            cb.run(b, __name__, seed=seed, test_dir=out,
                   params=TraceParams(bench=BenchConfig(CFG), trace_out=str(out / "trace.jsonl")))
            t2 = time.monotonic()
            print(f"{sim}: build {t1 - t0:.1f} s, trace run {t2 - t1:.1f} s ({out})")
            cache[sim, seed] = (out / "trace.jsonl").read_text().splitlines()
        return cache[sim, seed]

    return get


def _channels(lines):
    return {ch for ch in TRACE_CHANNELS if any(f'"ch": "{ch}"' in line for line in lines)}


@pytest.mark.cosim
def test_icarus_trace_equals_verilator(traces, seed, request):
    """Same seed, same Verilog: Icarus (-g2005) and Verilator traces are identical."""
    _require_icarus(request.config)
    ver = traces("verilator", seed)
    ica = traces("icarus", seed)
    assert _channels(ver) == set(TRACE_CHANNELS), "the workload left a channel untouched"
    diff = first_difference(ver, ica, context=3, names=("verilator", "icarus"))
    assert diff is None, f"Verilator and Icarus disagree (seed {seed}):\n{diff}"


@pytest.mark.cosim
def test_trace_follows_stimulus(traces, seed):
    """The comparison is not vacuous: another seed gives other transactions, and one changed
    field in a copy is reported at its own line with context."""
    base = traces("verilator", seed)
    other = traces("verilator", seed + 1)
    body = [line for line in base if '"cycle"' in line]
    assert len(body) > 100, f"trace too short to mean anything ({len(body)} transactions)"
    assert body != [line for line in other if '"cycle"' in line], \
        f"seeds {seed} and {seed + 1} produced the same transactions"

    i = next(k for k in range(len(base) // 2, len(base)) if '"ch": "r"' in base[k])
    perturbed = list(base)
    perturbed[i] = perturbed[i].replace('"rresp": 0', '"rresp": 2')
    assert perturbed[i] != base[i]
    report = first_difference(base, perturbed, context=3)
    assert report is not None and f"traces differ at line {i + 1} " in report, report
    assert f">{i + 1:6d}: {base[i]}" in report and f"{i - 2:6d}: {base[i - 3]}" in report
    assert first_difference(base, base[:-1]) is not None    # a missing last line counts
    assert first_difference(base, list(base)) is None
