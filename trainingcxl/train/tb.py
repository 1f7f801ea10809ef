"""cocotb test: DLRM training with the RTL in the loop (``make demo``; trainingcxl/train/job.py runs
it and writes the report).

Run parameters: :class:`TrainParams` (the result JSON goes to ``out``; also ``<out>.mlp`` = the
final MLP parameters, ``<out>.tables.npz`` = the final tables read from the PMEM model).

The trainer (:func:`sw_model.dlrm.train`) drives :class:`trainingcxl.train.rtl_device.RtlDevice`, whose
golden-model twin checks every completion, host read and recovery; the test fails on any
difference, on a training error, or when the final memory outside staging differs.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cocotb
import numpy as np
from cocotb.task import bridge

from cosim import params
from cosim.device_driver import DeviceDriver
from cosim.model_top import start_clock
from cosim.media import MediaTiming
from cosim.pmem_cpp import pmem_model
from cosim.tb.config import BenchConfig
from trainingcxl.train.rtl_device import RtlDevice
from trainingcxl.train.twin import make_twin
from sw_model.dlrm import DLRM, DLRMConfig, init_tables, npz_data, synthetic_data, train
from sw_model.memory import MemoryImage

CLOCK_NS = 10


@dataclass(frozen=True)
class TrainParams:
    """One training run. ``bench``: device configuration and optional boundary trace path;
    ``model``: the DLRM; ``crashes``: ``[[batch, fraction], ...]`` power-failure points;
    ``latency``: PMEM read/write latency; ``media``: the PMEM's latency and bandwidth per
    direction (cosim/media.py; overrides ``latency``; None: ``latency``, unlimited);
    ``data``: an npz click log (None: synthetic);
    ``out``: the result JSON; ``profile``: write a cProfile of the simulator process's cocotb
    side there and one of the trainer thread to ``<profile>.trainer``;
    ``datapath``: a sample cache and sampler (``trainingcxl.shade.job.prepare``), or None;
    ``twin``: where the golden-model twin runs (``trainingcxl.train.twin.make_twin``)."""
    bench: BenchConfig
    model: DLRMConfig
    batches: int
    crashes: list
    latency: int
    mlp_cycles: int
    seed: int
    out: str
    data: str | None = None
    progress_every: int = 10
    profile: str | None = None
    datapath: dict | None = None     # sample store, cache and sampler (trainingcxl.shade.job)
    media: MediaTiming | None = None
    twin: str = "process"          # trainingcxl.train.twin.TWIN_MODES


def _say(msg: str):
    print(f"  {msg}", flush=True)


@contextlib.contextmanager
def _profiled(path: str | None):
    """cProfile of this thread while the block runs, written to ``path`` after it (None:
    nothing)."""
    if not path:
        yield
        return
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    yield
    prof.disable()
    prof.dump_stats(path)


@cocotb.test()
async def train_with_power_failures(dut):
    spec = params.load(TrainParams)
    out = Path(spec.out)
    cfg = spec.bench.device
    seed = spec.seed
    mcfg = spec.model
    n = spec.batches
    stim = None
    if spec.bench.stimulus:                 # per-cycle ports for a replay without Python
        from cosim.trace.stimulus import StimulusRecorder
        stim = StimulusRecorder(dut, spec.bench.stimulus, cfg=cfg)
    start_clock(dut, CLOCK_NS)
    media = spec.media or MediaTiming(spec.latency, spec.latency)
    pmem = pmem_model(spec.bench.pmem, dut, clock=dut.clk, reset=dut.rst, seed=seed,
                      mem=MemoryImage(1 << cfg.addr_bits), log_writes=False,
                      **media.pmem_kwargs())
    # no host model while the device executes or the host does its MLP work: its channel
    # loop would wake Python on every clock edge (DeviceDriver.detach_while_waiting)
    drv = DeviceDriver(dut, pmem, cfg, host_seed=seed, use_irq=True, detach_while_waiting=True,
                       host=spec.bench.host, csr_model=spec.bench.csr)
    if spec.bench.trace:                    # boundary trace + host action log (docs/traces.md)
        from cosim.trace.device import record_device_trace
        record_device_trace(dut, spec.bench.trace, drv=drv, section="train", seed=seed, cfg=cfg,
                            period_ns=CLOCK_NS)
    layout = mcfg.layout(cfg)
    tables0 = init_tables(mcfg, cfg.frac_bits)
    init = MemoryImage(1 << cfg.addr_bits)
    for t, tab in enumerate(tables0):
        init.write(layout.table_base[t], tab.astype("<i4").tobytes())
    twin = make_twin(spec.twin, layout, tables0, mlp_lag=mcfg.lag_k, seed=seed)
    dev = RtlDevice(layout, drv=drv, twin=twin, mlp_lag=mcfg.lag_k,
                    mlp_cycles=spec.mlp_cycles, seed=seed, log=_say)
    t0 = time.monotonic()
    await dev.power_on(init)
    dev.compare_memory("after the first recovery (superblock formatted)")
    dev.plan_crashes([tuple(p) for p in spec.crashes])
    model = DLRM(mcfg)
    if spec.data:
        data = npz_data(spec.data, mcfg.batch_size)[0]
    else:
        data = synthetic_data(mcfg)
    dpath = None
    if spec.datapath:                   # sample store, cache and sampler (docs/shade.md)
        from trainingcxl.shade import job as shade_job
        data = dpath = shade_job.build(spec.datapath, spec.datapath["checkpoints"])
    every = spec.progress_every

    def progress(ev):
        if ev["kind"] == "batch":
            b = ev["batch"]
            if b % every == 0 or b == n:
                c = dev.phase_cycles.get(b, {})
                _say(f"batch {b:4d}/{n}  loss {ev['loss']:.4f}  "
                     f"{sum(c.values()):6d} cycles  crashes {len(dev.crashes)}  "
                     f"{time.monotonic() - t0:6.0f} s")

    def run():
        with _profiled(spec.profile and spec.profile + ".trainer"):   # the trainer thread
            try:
                res = train(dev, model, data, n, mcfg, progress=progress, data_feedback=dpath)
                dev.final_check()
            except BaseException:
                twin.kill()     # its verdict no longer matters
                raise
        return res

    with _profiled(spec.profile):                      # the simulator process's cocotb side
        res = await bridge(run)()
        if stim is not None:
            _say(f"stimulus: {stim.cycles} cycles recorded in {stim.close()}")
    wall = time.monotonic() - t0
    tables = dev.read_tables_q()
    np.savez(str(out) + ".tables.npz", *tables)
    Path(str(out) + ".mlp").write_bytes(model.to_bytes())
    rep = dict(
        seed=seed, batches=n, wall_s=round(wall, 3), cycles=pmem.cycle,
        media=dict(timing=media.describe(), r_queue_cycles=pmem.r_queue_cycles,
                   w_queue_cycles=pmem.w_queue_cycles),
        losses=[[b, float(x)] for b, x in res.loss_log],
        preds={str(b): [p.tolist(), y.tolist()] for b, (p, y) in res.preds.items()},
        snapshots=res.snapshots,
        crashes=[dict(dev.crashes[i], **{
            "trainer": dict(batch=c.batch, phase=c.phase, committed=c.committed,
                            mlp_epoch=c.mlp_epoch, redone=c.redone, mlp_lost=c.mlp_lost,
                            restart_failures=c.restart_failures)})
            for i, c in enumerate(res.crashes)],
        phase_cycles={str(b): v for b, v in sorted(dev.phase_cycles.items())},
        snap_background={str(e): v for e, v in sorted(dev.snap_background.items())},
        link=dev.link, stats=dev.stats, twin_checked=True,
        datapath=shade_job.summary(dpath) if dpath is not None else None,
    )
    if len(res.crashes) != len(dev.crashes):
        raise AssertionError(f"{len(dev.crashes)} power failures injected but the trainer "
                             f"recovered from {len(res.crashes)}")
    out.write_text(json.dumps(rep))
    print(f"  training done: {n} batches, {pmem.cycle} cycles, {wall:.0f} s", file=sys.stderr)
