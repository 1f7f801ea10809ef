"""cocotb bench: LOOKUP through the device top against the golden model.

Every test builds its workload in a ``MemoryImage``, runs the golden ``DeviceModel`` on one copy
and the RTL (with the PMEM model serving the other copy) and requires the completion (all fields
but ``cycles``) and the *whole* memory image to be identical, so a write outside the output
buffer is caught too. Configuration: :class:`cosim.tb.config.BenchConfig` from the run's
parameters (``device``; ``latency``: PMEM read/write latency, default 20).
"""
import dataclasses
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from cosim.pmem import PmemModel
from cosim.tb.config import bench_config
from cosim.streams import StreamSink, StreamSource
from cosim.trace.boundary import TraceRecorder
from hw.encodings import LookupErrorCode
from hw.gather.layouts import cmd_layout, cpl_layout
from sw_model.device import DeviceModel, LookupCmd, LookupCompletion
from sw_model.memory import MemoryImage
from sw_model.workload import LookupJob, RegionAllocator, make_bags, make_table

CLOCK_NS = 10


class GatherTB:
    """Device top + PMEM model + command/completion stream agents + golden model."""

    def __init__(self, dut, *, latency=None, stall=0.0, seed=None, trace=False):
        self.dut = dut
        self.bench = bench_config()
        self.cfg = self.bench.device
        # cocotb reseeds `random` per test from the run seed, so this is reproducible from it
        self.seed = random.getrandbits(32) if seed is None else seed
        self.rng = random.Random(self.seed)
        if latency is None:
            latency = self.bench.latency if self.bench.latency is not None else 20
        self.latency = latency
        self.mem = MemoryImage(1 << self.cfg.addr_bits)
        ab = self.cfg.addr_bits
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        # trace=True: a passive boundary monitor (cosim.trace.boundary), started with the clock so its
        # cycle numbers count this clock's edges; read it as self.trace.
        self.trace = (TraceRecorder(dut, clock=dut.clk, reset=dut.rst, period_ns=CLOCK_NS,
                                    streams={"cmd": cmd_layout(ab), "cpl": cpl_layout(ab)})
                      if trace else None)
        stalls = {ch: stall for ch in ("ar", "r", "aw", "w", "b")} if stall else None
        self.pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=latency,
                              write_latency=latency, seed=self.seed, stall=stalls, mem=self.mem)
        self.cmd = StreamSource(dut, "cmd", cmd_layout(ab), dut.clk, dut.rst)
        self.cpl = StreamSink(dut, "cpl", cpl_layout(ab), dut.clk, dut.rst)
        if stall:
            self.cmd.set_pause_generator(self._pauses(stall, 1))
            self.cpl.set_pause_generator(self._pauses(stall, 2))
        self.tables = RegionAllocator(self.cfg.table_base, self.cfg.table_size)
        self.staging = RegionAllocator(self.cfg.staging_base, self.cfg.staging_size)
        dut._log.info(f"GatherTB seed={self.seed} latency={latency} stall={stall} "
                      f"cfg={self.cfg.to_json()}")

    def _pauses(self, p, salt):
        r = random.Random(self.seed * 7919 + salt)
        while True:
            yield r.random() < p

    async def reset(self):
        """Reset; the host's CXL.mem channels stay idle (driven, so no simulator sees X/Z on
        them); returns once the DCOH finished its init sweep."""
        for ch in ("m2s_req", "m2s_rwd", "m2s_birsp"):
            getattr(self.dut, f"{ch}__valid").value = 0
            getattr(self.dut, f"{ch}__payload").value = 0
        for ch in ("s2m_ndr", "s2m_drs", "s2m_bisnp"):
            getattr(self.dut, f"{ch}__ready").value = 1
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        while not self.dut.ready.value:
            await RisingEdge(self.dut.clk)

    # -- workloads ---------------------------------------------------------------------------
    def job(self, table, offsets, indices, *, tag=0, poison=0x5A5A5A5A) -> LookupJob:
        """Lay a job out in this bench's memory (output buffer pre-filled with ``poison``)."""
        return LookupJob.layout(self.cfg, self.mem, table, offsets, indices, tag=tag,
                                table_alloc=self.tables, staging_alloc=self.staging,
                                poison=poison)

    def random_job(self, *, rows, dim, n_bags, pooling, mode="uniform", alpha=0.0, extreme=0.0,
                   tag=0) -> LookupJob:
        rng = np.random.default_rng(self.rng.getrandbits(32))
        table = make_table(rng, rows, dim, self.cfg.frac_bits, 1.0, extreme)
        offsets, indices = make_bags(rng, n_bags, pooling, rows, mode=mode, alpha=alpha)
        return self.job(table, offsets, indices, tag=tag)

    # -- execution ---------------------------------------------------------------------------
    async def run_rtl(self, cmd: LookupCmd, timeout_cycles=None) -> LookupCompletion:
        lines = cmd.n_bags * max(cmd.dim, 16) // 16 if cmd.dim in (16, 32, 64, 128) else 0
        budget = timeout_cycles or (200_000 + 40 * (self.latency + 8) * (lines + 64))
        await self.cmd.send(dataclasses.asdict(cmd))
        for _ in range(budget):
            await RisingEdge(self.dut.clk)
            if not self.cpl.empty():
                return LookupCompletion(**await self.cpl.recv())
        raise AssertionError(f"LOOKUP tag={cmd.tag} did not complete within {budget} cycles "
                             f"(seed {self.seed})")

    async def compare(self, cmd: LookupCmd, *, limit=8):
        """Run ``cmd`` on the golden model and the RTL. Returns the RTL completion, the
        completion fields that differ and the first ``limit`` memory-image differences
        (``(address, description)``); all empty when the RTL equals the model."""
        gold_mem = self.mem.copy()
        want = DeviceModel(self.cfg, gold_mem).lookup(cmd)
        got = await self.run_rtl(cmd)
        return got, want.mismatches(got), gold_mem.diff(self.mem, limit=limit)

    async def check(self, cmd: LookupCmd, expect_code=None) -> LookupCompletion:
        """Run ``cmd`` on the golden model and the RTL; require identical completion and memory."""
        got, diffs, mdiff = await self.compare(cmd)
        assert not diffs, (f"completion mismatch (golden vs RTL) for {cmd}: {diffs} "
                           f"(seed {self.seed})")
        assert not mdiff, ("memory image mismatch (golden vs RTL), first differences:\n" +
                           "\n".join(f"{a:#x}: {d}" for a, d in mdiff) + f"\n(seed {self.seed})")
        if expect_code is not None:
            assert got.err_code == expect_code, \
                f"expected {LookupErrorCode(expect_code).name}, got {LookupErrorCode(got.err_code).name}"
        return got
