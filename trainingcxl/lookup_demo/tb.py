"""cocotb side of ``make lookup-demo``: several embedding tables, Zipf-skewed bags, through the
RTL and the golden model. Run parameters: :class:`LookupDemoParams`. A mismatch is recorded
(first one, with context) and fails the test."""
import json
import pathlib
import time
from dataclasses import dataclass

import cocotb
import numpy as np

from cosim import params
from cosim.tb.config import BenchConfig
from cosim.tb.gather import GatherTB
from sw_model.workload import make_bags, make_table




@dataclass(frozen=True)
class LookupDemoParams:
    """``tables``: ``{"rows", "dim", "pooling", "alpha"}`` each; ``bags`` per table;
    ``latency``: PMEM latency; ``out``: the result JSON."""
    tables: list
    bags: int
    latency: int
    seed: int
    out: str
    bench: BenchConfig = BenchConfig()


@cocotb.test()
async def demo_lookup_workload(dut):
    """Default demo workload: every table's LOOKUP equals the golden model."""
    p = params.load(LookupDemoParams)
    spec = {"tables": p.tables, "bags": p.bags, "latency": p.latency, "seed": p.seed}
    tb = GatherTB(dut, latency=spec["latency"], seed=spec["seed"])
    await tb.reset()
    rng = np.random.default_rng(spec["seed"])
    results, first_mismatch = [], None
    for t, tab in enumerate(spec["tables"]):
        t0 = time.time()
        table = make_table(rng, tab["rows"], tab["dim"], tb.cfg.frac_bits)
        offsets, indices = make_bags(rng, spec["bags"], tab["pooling"], tab["rows"],
                                     mode="uniform", alpha=tab["alpha"])
        job = tb.job(table, offsets, indices, tag=t)
        r0, c0 = tb.pmem.r_beats, tb.pmem.cycle
        got, diffs, mdiff = await tb.compare(job.cmd, limit=4)
        cycles = tb.pmem.cycle - c0
        if (diffs or mdiff) and first_mismatch is None:
            first_mismatch = {"table": t, "completion": diffs,
                              "memory": [f"{a:#x}: {d}" for a, d in mdiff]}
        results.append({
            "table": t, **tab, "bags": spec["bags"], "rows_gathered": got.rows,
            "row_lines": got.rows * tab["dim"] // 16, "out_lines": got.out_lines,
            "index_bytes": 4 * len(indices), "offset_bytes": 4 * len(offsets),
            "cycles": cycles, "rtl_cycles": got.cycles,
            "media_lines": (tb.pmem.r_beats - r0) // tb.cfg.beats_per_line,
            "sat": got.sat, "err_code": got.err_code, "match": not (diffs or mdiff),
            "wall_s": time.time() - t0,
        })
        print(f"  table {t}: dim {tab['dim']:>3}, {tab['rows']} rows, {spec['bags']} bags, "
              f"{got.rows} rows gathered in {cycles} cycles "
              f"({'match' if results[-1]['match'] else 'MISMATCH'})", flush=True)
    pathlib.Path(p.out).write_text(json.dumps(
        {"spec": spec, "tables": results, "first_mismatch": first_mismatch}, indent=1))
    assert first_mismatch is None, f"RTL differs from the golden model: {first_mismatch}"
