"""cocotb test of ``trainingcxl stress``: one long seeded random run of the DCOH test top with
the caching host (every legal kind, loads/stores, silent drops, adversarial delays and stalls)
and device traffic on a few hot lines; the figures and violations go to a JSON file.

Run parameters: :class:`StressParams` (written by :mod:`trainingcxl.stress.job`).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import cocotb

from cosim import params
from cosim.cxl_host import HostKnobs
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import DcohTB

__all__ = ["StressParams", "stress"]


@dataclass(frozen=True)
class StressParams:
    """``bench``: device configuration, PMEM latency, host trace, strict media check;
    ``messages``: host messages; ``lines``: hot lines; ``stall``: host and device channel stall
    probability; ``pmem_stall``: PMEM AXI stall probability; ``conflict_tag``: ``fresh`` or
    ``req`` (``HostKnobs``); ``poison``: probability that a host uncached write carries poison
    (``HostKnobs.poison_p``); ``out``: the result JSON; ``profile``: a cProfile path."""
    out: str
    bench: BenchConfig = BenchConfig()
    messages: int = 10000
    lines: int = 16
    stall: float = 0.2
    seed: int = 1
    pmem_stall: float = 0.0
    conflict_tag: str = "fresh"
    profile: str | None = None
    poison: float = 0.0


@cocotb.test()
async def stress(dut):
    """One long random run; results go to ``StressParams.out`` (JSON)."""
    p = params.load(StressParams)
    n, n_lines, stall, seed, pmem_stall = p.messages, p.lines, p.stall, p.seed, p.pmem_stall
    knobs = HostKnobs(conflict_tag=p.conflict_tag, poison_p=p.poison)
    tb = DcohTB(dut, seed=seed, host_stall=stall, dev_stall=stall, pmem_stall=pmem_stall,
                knobs=knobs, log_writes=False)
    await tb.reset()
    lines = [tb.line("table", i * 5) for i in range(n_lines - n_lines // 4)] + \
        [tb.line("staging", i) for i in range(n_lines // 4)]
    tb.dev.start_random(n // 5, lines, p=0.08)
    prof = None
    if p.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.monotonic()
    c0 = tb.cycle
    tb.core.start_random(n, lines)
    await tb.drain(timeout=400 * n + 100_000)
    wall = time.monotonic() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(p.profile)
    s = await tb.finish(check=False)
    s.update(wall_s=round(wall, 2), sim_cycles=tb.cycle - c0,
             host_messages_per_s=round(s["messages_sent"] / wall, 1),
             cycles_per_s=round((tb.cycle - c0) / wall, 1),
             first_violations=[str(v) for v in tb.violations()[:20]])
    Path(p.out).write_text(json.dumps(s, indent=1, default=str))
