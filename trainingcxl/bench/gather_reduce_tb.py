"""cocotb benchmark points for LOOKUP throughput (driven by trainingcxl/bench/gather_reduce.py).

Run parameters: :class:`GatherBenchParams` (point ``i`` writes ``<out>/<i>.json``). Each point is its own cocotb test (fresh PMEM model with that latency), checks the
result against the golden model (a wrong result fails the point) and records exact cycle counts.
"""
import json
import pathlib
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from cosim import params
from cosim.tb.config import BenchConfig
from cosim.tb.gather import GatherTB
from sw_model.workload import make_bags, make_table



@dataclass(frozen=True)
class GatherBenchParams:
    """``bench``: the device configuration; ``points``: ``{"latency", "pooling", "dim",
    "lines"}`` each; ``out``: the directory point ``i`` writes ``<i>.json`` to."""
    bench: BenchConfig = BenchConfig()
    points: list = field(default_factory=list)
    out: str = "."


P = params.current(GatherBenchParams)
POINTS = P.points
TABLE_ROWS = 4096


def _middle_half_rate(samples):
    """R beats per cycle between 25 % and 75 % of the command's duration (sustained rate,
    without the dependent-read fill at the start and the write drain at the end)."""
    t0, t1 = samples[0][0], samples[-1][0]
    a = min(samples, key=lambda s: abs(s[0] - (t0 + (t1 - t0) // 4)))
    b = min(samples, key=lambda s: abs(s[0] - (t0 + 3 * (t1 - t0) // 4)))
    return (b[1] - a[1]) / max(1, b[0] - a[0])


@cocotb.test()
@cocotb.parametrize(i=list(range(len(POINTS))))
async def bench_point(dut, i):
    """One (latency, pooling, dim) point: cycles, lines/cycle and media read-port utilization."""
    p = POINTS[i]
    lat, pooling, dim = p["latency"], p["pooling"], p["dim"]
    lpr = dim // 16
    tb = GatherTB(dut, latency=lat, seed=1000 + i)
    await tb.reset()
    n_bags = max(1, -(-p["lines"] // (pooling * lpr)))
    rng = np.random.default_rng(tb.seed)
    table = make_table(rng, TABLE_ROWS, dim, tb.cfg.frac_bits)
    offsets, indices = make_bags(rng, n_bags, pooling, TABLE_ROWS, mode="fixed")
    job = tb.job(table, offsets, indices)
    await RisingEdge(dut.clk)
    r0, c0 = tb.pmem.r_beats, tb.pmem.cycle
    samples = []              # (cycle, R beats so far), every 16 cycles while the command runs
    done = []

    async def sample():
        while not done:
            samples.append((tb.pmem.cycle, tb.pmem.r_beats))
            for _ in range(16):
                await RisingEdge(dut.clk)
    cocotb.start_soon(sample())
    cpl = await tb.check(job.cmd, 0)
    done.append(1)
    c1 = tb.pmem.cycle
    cycles = c1 - c0
    r_beats = tb.pmem.r_beats - r0
    row_lines = n_bags * pooling * lpr
    beats_per_line = tb.cfg.beats_per_line
    res = {
        **p, "max_reads": tb.cfg.max_reads, "max_writes": tb.cfg.max_writes, "bags": n_bags,
        "row_lines": row_lines, "media_lines": r_beats // beats_per_line,
        "cycles": cycles, "rtl_cycles": cpl.cycles,
        "lines_per_cycle": row_lines / cycles,
        "port_util": r_beats / beats_per_line / cycles,
        "steady_port_util": _middle_half_rate(samples) / beats_per_line,
        "little_ok": tb.cfg.max_reads >= lat + 8,
    }
    out = pathlib.Path(P.out)
    (out / f"{i}.json").write_text(json.dumps(res))
    print(f"  [{i + 1}/{len(POINTS)}] max_reads {res['max_reads']} latency {lat:>3} pooling "
          f"{pooling:>3} dim {dim:>3}: {cycles} cycles, port util {res['port_util']:.3f}, "
          f"sustained {res['steady_port_util']:.3f}", flush=True)
