"""cocotb benchmark of the training step on the full device top (driven by trainingcxl/bench/training.py).

One simulator launch runs every point of ``TrainingBenchParams.points`` on one device:
power on, RECOVER (formats a fresh superblock), program the rings and LR; then per point a
fresh table (directory entry 0) and one batch per run. Per point and per *gap* variant
(``none``: LOOKUP and UPDATE rung together; ``mlp``: the UPDATE is rung ``gap`` cycles after the
LOOKUP's completion, the host's MLP time; ``gap`` default = run a's LOOKUP ``cycles``) the runs
below, each one batch ``LOOKUP, UPDATE, COMMIT`` (c with the gap only if the point has
``gap_c``: its LOOKUP writes no undo records, so the gap only adds itself):

- ``a`` (no logging): LOOKUP without LOG, UPDATE with NOLOG;
- ``b`` (logging during LOOKUP): LOOKUP with LOG, UPDATE normal;
- ``c`` (synchronous logging): LOOKUP without LOG, UPDATE normal.

Every run is checked against ``sw_model.training.TrainingDevice`` fed the same descriptors on
its own memory: every completion (``cycles``/``seq`` skipped), the LOOKUP output and every row
of the table the batch touched (a mismatch fails the test; the result JSON says ``match``).

Timing (exact clock cycles of the PMEM model, ``pmem.cycle``):

- ``t_db``: the cycle the AXI4-Lite write of ``CMD_TAIL`` (doorbell of the LOOKUP) returned;
- ``lk_end`` / ``up_end``: the B handshake (write acknowledged, persistent) of the LOOKUP's /
  UPDATE's completion-record write on ``m_axi`` (the device advances CPL_HEAD right after);
- ``critical`` = ``up_end - t_db`` (architecture: LOOKUP issue to UPDATE completion);
  ``critical_minus_gap`` subtracts the cycles between ``lk_end`` and the UPDATE's doorbell.

Media writes are classified by address from the PMEM model's write log (AW handshake cycle):
table rows, undo log, other (staging: outputs, completions, ring). PMEM read/write latency is
set per point on the model (``pmem.read_latency``/``write_latency``) while the device is idle.

Run parameters: :class:`TrainingBenchParams` (point ``i`` writes ``<out>/<i>.json``).
"""
from __future__ import annotations

import json
import pathlib
import time
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from cosim import params
from cosim.device_driver import DeviceDriver
from cosim.model_top import start_clock
from cosim.pmem import PmemModel
from cosim.tb.config import BenchConfig
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, FLAG_LOG, FLAG_NOLOG, DescKind,
                          unpack_fields)
from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice
from sw_model.workload import RegionAllocator, make_table, zipf_indices



@dataclass(frozen=True)
class TrainingBenchParams:
    """``bench``: the device configuration; ``points``: the grid points; ``seed``: the
    workload seed; ``via_host``: descriptors/completions through the CXL.mem host (else
    backdoor); ``out``: the directory point ``i`` writes ``<i>.json`` to."""
    bench: BenchConfig = BenchConfig()
    points: list = field(default_factory=list)
    seed: int = 1
    via_host: bool = False
    out: str = "."


P = params.current(TrainingBenchParams)
CFG = P.bench.device
RING = 16
# descriptors/completions through the CXL.mem host model (1) or backdoor (0, faster simulation;
# the timed window is the same: descriptors are in the ring before the doorbell)
VIA_HOST = P.via_host
WAIT = 50_000_000   # cycles a run may take (synchronous logging at latency 200: ~1M)
POLL = 128          # cycles between CPL_HEAD polls (timing comes from the m_axi write log)
MODES = ("a", "b", "c")
SKIP = ("cycles", "seq")
PERF = ("PERF_CYC_LOOKUP", "PERF_CYC_UPDATE", "PERF_LINES_WR", "PERF_LINES_RD",
        "PERF_LOG_RECORDS", "PERF_UPD_STALLS", "PERF_SET_OVERFLOW")


def _lr_fixed(x: float) -> int:
    return int(round(x * (1 << CFG.frac_bits)))


class Point:
    """Workload of one point: table rows touched, bags, gradients, and their addresses."""

    def __init__(self, p: dict, rng: np.random.Generator, talloc, salloc):
        self.p = p
        self.dim, self.rows = p["dim"], p["rows"]
        n = p["n_bags"] * p["pooling"]
        if p["dist"] == "uniform":
            idx = rng.integers(0, self.rows, size=n, dtype=np.int64).astype(np.uint32)
        elif p["dist"] == "zipf":
            idx = zipf_indices(rng, n, self.rows, p.get("alpha", 1.05), shuffle=True)
        else:
            raise ValueError(f"unknown dist {p['dist']!r}")
        self.indices = idx
        self.offsets = (np.arange(p["n_bags"] + 1) * p["pooling"]).astype(np.uint32)
        self.touched = np.unique(idx)
        self.base = talloc.alloc(self.rows * self.dim * 4)
        self.init_rows = make_table(rng, len(self.touched), self.dim, CFG.frac_bits)
        self.grads = (rng.standard_normal((p["n_bags"], self.dim)) *
                      (1 << CFG.frac_bits)).astype(np.int32)
        self.oaddr = salloc.alloc(4 * len(self.offsets))
        self.iaddr = salloc.alloc(4 * len(idx))
        self.gaddr = salloc.alloc(self.grads.nbytes)
        self.out = salloc.alloc(self.grads.nbytes)

    def staging(self):
        return [(self.oaddr, self.offsets.astype("<u4").tobytes()),
                (self.iaddr, self.indices.astype("<u4").tobytes()),
                (self.gaddr, self.grads.astype("<i4").tobytes())]

    def load_rows(self, mem):
        rb = self.dim * 4
        for r, vals in zip(self.touched.tolist(), self.init_rows):
            mem.write(self.base + r * rb, vals.astype("<i4").tobytes())

    def read_rows(self, mem) -> bytes:
        rb = self.dim * 4
        return b"".join(mem.read(self.base + r * rb, rb) for r in self.touched.tolist())


class TrainingBench:
    def __init__(self, dut):
        self.dut = dut
        start_clock(dut, 10)
        self.rtl_mem = MemoryImage(1 << CFG.addr_bits)
        self.model_mem = MemoryImage(1 << CFG.addr_bits)
        self.pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=100,
                              write_latency=100, mem=self.rtl_mem, log_writes=True)
        seed = P.seed
        self.seed = seed
        try:    # quiet=False: cocotb's log level (WARNING from trainingcxl/bench/training.py) applies
            self.drv = DeviceDriver(dut, self.pmem, CFG, via_host=VIA_HOST, host_seed=seed,
                                    poll=POLL, quiet=False)
        except TypeError:
            self.drv = DeviceDriver(dut, self.pmem, CFG, via_host=VIA_HOST, host_seed=seed,
                                    poll=POLL)
        self.model = TrainingDevice(CFG, self.model_mem)
        self.lr = _lr_fixed(0.05)
        self.model.lr = self.lr
        self.talloc = RegionAllocator(CFG.table_base, CFG.table_size)
        self.salloc = RegionAllocator(CFG.staging_base, CFG.staging_size)
        self.ring_base = self.salloc.alloc(RING * DESC_BYTES)
        self.cpl_base = self.salloc.alloc(RING * CPL_BYTES)
        self.tail = 0
        self.tag = 0
        self.batch = 0          # committed

    def cycle(self) -> int:
        return self.pmem.cycle

    async def start(self):
        await self.drv.power_cycle()
        assert await self.drv.recover() == 0
        self.model.recover()
        await self.drv.configure([], self.lr, self.ring_base, RING, self.cpl_base)
        await self.drv.write("IRQ_ENABLE", 1)          # CPL: the bench waits on ``irq``

    async def set_table(self, pt: Point):
        await self.drv.write64("TABLE0_BASE", pt.base)
        await self.drv.write("TABLE0_ROWS", pt.rows)
        await self.drv.write("TABLE0_DIM", pt.dim)
        self.model.set_table(0, pt.base, pt.rows, pt.dim)

    async def perf(self) -> dict:
        return {k: await self.drv.read(k) for k in PERF}

    async def doorbell(self, v: int):
        await self.drv.write("CMD_TAIL", v)
        t = self.cycle()
        if await self.drv.read("CMD_TAIL") != v:
            raise AssertionError(f"doorbell {v} refused: {await self.drv.error_state()}")
        self.drv.tail = v        # the driver's ring state (functional coverage of its waits)
        return t

    def _desc(self, kind, flags, pt: Point, batch: int):
        self.tag += 1
        if kind == DescKind.COMMIT:
            return TrainingDevice.make_desc(kind=kind, tag=self.tag, batch=batch)
        data = pt.out if kind == DescKind.LOOKUP else pt.gaddr
        return TrainingDevice.make_desc(
            kind=kind, flags=flags, table=0, tag=self.tag, batch=batch, n_bags=pt.p["n_bags"],
            offsets_addr=pt.oaddr, indices_addr=pt.iaddr, data_addr=data)

    async def run(self, pt: Point, mode: str, gap: int | None) -> dict:
        """One batch (LOOKUP, UPDATE, COMMIT) in ``mode``; ``gap`` None = rung together."""
        b = self.batch + 1
        lk_flags = FLAG_LOG if mode == "b" else 0
        up_flags = FLAG_NOLOG if mode == "a" else 0
        descs = [self._desc(DescKind.LOOKUP, lk_flags, pt, b),
                 self._desc(DescKind.UPDATE, up_flags, pt, b),
                 self._desc(DescKind.COMMIT, 0, pt, b)]
        want = [unpack_fields(CPL_FIELDS, self.model.execute(d)) for d in descs]
        slots = [(self.tail + i) % RING for i in range(3)]
        await self.drv._write_lines([(self.ring_base + DESC_BYTES * s, d)
                                     for s, d in zip(slots, descs)])
        await self.drv.write("IRQ_STATUS", 7)
        p0 = await self.perf()
        self.pmem.write_log.clear()
        cpl_addr = [self.cpl_base + CPL_BYTES * s for s in slots]
        if gap is None:
            t_db = await self.doorbell(slots[2])
            t_db2 = t_db
            await self.drv.wait_head(slots[2], WAIT)
        else:
            t_db = await self.doorbell(slots[1])
            while not self.dut.irq.value:
                await RisingEdge(self.dut.irq)
            await ClockCycles(self.dut.clk, max(1, gap - 2))
            t_db2 = await self.doorbell(slots[2])
            await self.drv.wait_head(slots[2], WAIT)
        p1 = await self.perf()
        wlog = list(self.pmem.write_log)
        await self.doorbell((slots[2] + 1) % RING)                 # COMMIT (not timed)
        await self.drv.wait_head((slots[2] + 1) % RING, WAIT)
        self.tail = (slots[2] + 1) % RING
        self.batch = b
        got = [unpack_fields(CPL_FIELDS, r) for r in await self.drv._read_lines(cpl_addr)]

        # ---- correctness: completions, LOOKUP output, rows the batch touched ----------------
        bad = []
        for k, (w, g) in enumerate(zip(want, got)):
            diff = {f: (w[f], g[f]) for f in w if f not in SKIP and int(w[f]) != int(g[f])}
            if diff:
                bad.append(f"desc {k}: (model, RTL) {diff}")
        nb = pt.grads.nbytes
        if self.rtl_mem.read(pt.out, nb) != self.model_mem.read(pt.out, nb):
            bad.append("LOOKUP output differs")
        if pt.read_rows(self.rtl_mem) != pt.read_rows(self.model_mem):
            bad.append("table rows differ from the model after the batch")

        # ---- timing --------------------------------------------------------------------------
        def b_of(addr):
            recs = [w for w in wlog if w.addr == addr]
            assert len(recs) == 1, f"completion write at {addr:#x}: {len(recs)} records"
            return recs[0].b_cycle

        lk_end, up_end = b_of(cpl_addr[0]), b_of(cpl_addr[1])
        up_start = up_end - got[1]["cycles"]          # the UPDATE's FETCH (approximately)
        log0, log1 = CFG.log_base, CFG.log_base + CFG.log_size
        t0, t1 = pt.base, pt.base + pt.rows * pt.dim * 4

        def count(lo, hi, a0, a1):
            return sum(1 for w in wlog if lo < w.aw_cycle <= hi and a0 <= w.addr < a1)

        row_aw = [w.aw_cycle for w in wlog if t0 <= w.addr < t1]
        d = {k: (p1[k] - p0[k]) & 0xFFFFFFFF for k in PERF}
        lines = got[1]["lines"]
        res = {
            "mode": mode, "gap": gap, "batch": b, "match": not bad, "mismatch": bad,
            "t_db": t_db, "lk_end": lk_end, "up_end": up_end,
            "critical": up_end - t_db,
            "gap_actual": (t_db2 - lk_end) if gap is not None else 0,
            "critical_minus_gap": up_end - t_db - ((t_db2 - lk_end) if gap is not None else 0),
            "lookup_cycles": got[0]["cycles"], "update_cycles": got[1]["cycles"],
            "lookup_log_records": got[0]["log_records"],
            "update_log_records": got[1]["log_records"],
            "update_rows": got[1]["rows"], "update_lines": lines,
            "perf": d,
            # update engine write-port utilisation
            "util_perf": lines / max(1, d["PERF_CYC_UPDATE"]),
            "util_update_cpl": lines / max(1, got[1]["cycles"]),
            "row_writes": len(row_aw),
            "row_write_span": (max(row_aw) - min(row_aw) + 1) if row_aw else 0,
            "util_row_span": (len(row_aw) / (max(row_aw) - min(row_aw) + 1)) if row_aw else 0.0,
            "log_writes_lookup": count(t_db - 1, lk_end, log0, log1),
            "log_writes_after_lookup": count(lk_end, up_end, log0, log1),
            "log_writes_during_update": count(up_start, up_end, log0, log1),
            "media_writes_during_update": count(up_start, up_end, 0, 1 << CFG.addr_bits),
        }
        res["media_write_util_update"] = res["media_writes_during_update"] / max(
            1, got[1]["cycles"])
        return res


@cocotb.test()
async def training_bench(dut):
    """Every point of ``TrainingBenchParams.points``: runs a/b/c without and with the MLP gap; each run's
    completions, LOOKUP output and touched table rows equal the golden model's."""
    points = P.points
    out = pathlib.Path(P.out)
    tb = TrainingBench(dut)
    await tb.start()
    failures = []
    for i, p in enumerate(points):
        w0 = time.time()
        rng = np.random.default_rng([tb.seed, i])
        pt = Point(p, rng, tb.talloc, tb.salloc)
        pt.load_rows(tb.rtl_mem)
        pt.load_rows(tb.model_mem)
        for a, data in pt.staging():
            tb.rtl_mem.write(a, data)
            tb.model_mem.write(a, data)
        tb.pmem.read_latency = tb.pmem.write_latency = p["latency"]
        await tb.set_table(pt)
        runs = []
        for m in MODES:
            runs.append(await tb.run(pt, m, None))
        gap = p.get("gap")
        if gap is None:       # default: the LOOKUP's own duration in run a
            gap = runs[0]["lookup_cycles"]
        if gap:
            # run c with the gap only if asked: its LOOKUP writes no records, so nothing
            # drains in the gap and c+gap = c + gap exactly (measured in the quick bench)
            for m in (MODES if p.get("gap_c") else ("a", "b")):
                runs.append(await tb.run(pt, m, gap))
        for r in runs:
            if not r["match"]:
                failures.append(f"point {i} mode {r['mode']} gap {r['gap']}: {r['mismatch']}")
        res = {**p, "point": i, "seed": tb.seed, "distinct_rows": int(len(pt.touched)),
               "lookups": int(len(pt.indices)), "mlp_gap": gap, "runs": runs,
               "wall_s": round(time.time() - w0, 1)}
        (out / f"{i}.json").write_text(json.dumps(res))
        print(f"  point {i} ({p['dist']}, dim {p['dim']}, lat {p['latency']}): "
              + ", ".join(f"{r['mode']}{'+gap' if r['gap'] else ''}={r['critical']}"
                          for r in runs) + f"  [{res['wall_s']} s]", flush=True)
    assert not failures, f"RTL differs from the golden model (seed {tb.seed}): {failures}"
