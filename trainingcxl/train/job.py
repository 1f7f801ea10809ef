"""``make demo``: train the default small DLRM with the RTL in the loop, through power failures.

    trainingcxl train [--batches N] [--crashes K] [--seed S] [--out build/report] ...

1. Builds the device simulator (Verilator, cached by content).
2. Trains ``--batches`` batches of the synthetic click log (or ``--data FILE.npz``) with the
   embeddings on the RTL (trainingcxl/train/tb.py: LOOKUP+LOG, UPDATE, SNAPSHOT, COMMIT through the
   CXL.mem host model), the host's MLP time modelled as ``--mlp-cycles`` of waiting before each
   UPDATE; cuts power at ``--crashes`` seeded points (batch, fraction of a batch), recovers
   (tables from the undo log, MLP from the newest valid slot), resumes at the next batch. A
   golden-model twin checks every completion, host read, recovery and the final memory.
3. Trains the same model on the golden model without failures and on float32 embeddings.
4. Evaluates all three on a held-out split, prints the summary and writes ``--out``:
   ``report.md``, ``summary.json``, ``loss.png``, ``cycles.png``.

Exit status 0 when the RTL run completed and matched its golden-model twin; 1 otherwise; 2 on
bad options.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from trainingcxl.train.report import build_report, summarize, write_report
from trainingcxl.train.twin import TWIN_MODES


def crash_schedule(seed: int, batches: int, n: int) -> list[tuple[int, float]]:
    """``n`` distinct batches in 2..batches-1 (seeded), each with a fraction in [0, 1)."""
    rng = random.Random(f"demo-schedule-{seed}")
    pool = list(range(2, max(2, batches)))
    picks = sorted(rng.sample(pool, min(n, len(pool))))
    return [(b, round(rng.random(), 4)) for b in picks]


def _args(argv):
    from cosim.csr_cpp import CSR_MODELS
    from cosim.host_cpp import HOST_MODELS
    from cosim.tb.config import PMEM_MODELS, BenchConfig
    from sw_model.dlrm import DLRMConfig
    d = DLRMConfig()
    ap = argparse.ArgumentParser(prog="trainingcxl train",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200, help="training batches (default 200)")
    ap.add_argument("--crashes", type=int, default=3, help="power failures (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="crash schedule, PMEM and host seed")
    ap.add_argument("--latency", type=int, default=40,
                    help="PMEM read and write latency in cycles of the 'ideal' media (40)")
    from cosim.media import DEFAULT_CLOCK_MHZ, PRESETS
    ap.add_argument("--media", choices=tuple(PRESETS), default="ideal",
                    help="PMEM media timing (docs/benchmarks.md 'Media timing'): 'ideal' = "
                         "--latency, unlimited bandwidth (default); 'dram', 'optane': published "
                         "latency and bandwidth per direction, converted at --media-clock-mhz")
    ap.add_argument("--media-clock-mhz", type=float, default=DEFAULT_CLOCK_MHZ,
                    help=f"device clock the media preset is converted at ({DEFAULT_CLOCK_MHZ})")
    for d_ in ("read", "write"):
        ap.add_argument(f"--{d_}-latency", type=int, default=None, metavar="CYCLES",
                        help=f"override the preset's {d_} latency")
        ap.add_argument(f"--{d_}-bw", default=None, metavar="BYTES_PER_CYCLE",
                        help=f"override the preset's {d_} bandwidth (e.g. 13.9, 197/5, none)")
    ap.add_argument("--mlp-cycles", type=int, default=1000,
                    help="host MLP time per batch, cycles between LOOKUP and UPDATE (1000)")
    ap.add_argument("--lag", type=int, default=d.lag_k, help=f"MLP lag bound k ({d.lag_k})")
    ap.add_argument("--batch-size", type=int, default=d.batch_size)
    ap.add_argument("--lr", type=float, default=d.lr, help="MLP learning rate")
    ap.add_argument("--emb-lr", type=float, default=d.emb_lr, help="embedding learning rate")
    ap.add_argument("--dim", type=int, default=d.emb_dim, help="embedding dim (16/32/64/128)")
    ap.add_argument("--rows", type=str, default=",".join(map(str, d.table_rows)),
                    help="rows per table, comma separated (one table each)")
    ap.add_argument("--eval-batches", type=int, default=64,
                    help="held-out batches for loss/AUC (default 64; synthetic data)")
    ap.add_argument("--data", type=Path, default=None,
                    help="train on this npz click log (docs/dlrm.md) instead of the synthetic "
                         "one: its tables, the first 90%% of its samples for training, the rest "
                         "held out")
    ap.add_argument("--out", type=Path, default=Path("build/report"))
    ap.add_argument("--quiet", action="store_true", help="no per-batch progress lines")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write a cProfile of the simulator process here (its cocotb side) "
                         "and one of the trainer thread to PROFILE.trainer")
    ap.add_argument("--trace", type=Path, default=None,
                    help="record every boundary transaction (CXL.mem, media, CSR) as JSON lines "
                         "here (docs/traces.md; large: one line per handshake)")
    ap.add_argument("--stimulus", type=Path, default=None, metavar="DIR",
                    help="record the device's ports every cycle into DIR, for the replay of "
                         "`python -m trainingcxl.bench.verilator_speed --load DIR` "
                         "(about 0.6 kB per cycle)")
    ap.add_argument("--pmem", choices=PMEM_MODELS, default="cpp",
                    help="PMEM model: the C++ one compiled into the simulator (default; about "
                         "2x faster) or the Python one (cosim/pmem.py); both give the same "
                         "cycles, images and crash images (docs/crash.md)")
    ap.add_argument("--host", choices=HOST_MODELS, default=None,
                    help="CXL.mem host model: the one compiled into the simulator (default) or "
                         "the Python one (cosim/cxl_host; default with --trace, whose host "
                         "action log needs it); both send the same requests and check the "
                         "same answers (cosim/host_cpp)")
    ap.add_argument("--csr", choices=CSR_MODELS, default=None,
                    help="AXI4-Lite CSR master: the one compiled into the simulator (default; "
                         "a completion wait is one job) or cocotbext-axi's (cosim/csr.py; "
                         "default with --trace, whose host action log records each access); "
                         "both make the same register accesses (cosim/csr_cpp)")
    ap.add_argument("--twin", choices=TWIN_MODES, default="process",
                    help="where the golden-model twin checks the RTL: in its own process, on "
                         "another core, beside the simulator (default; a difference is raised "
                         "a few calls after the one that found it) or inline in the simulator "
                         "process (raised at once, with its traceback)")
    ap.add_argument("--clock", choices=("own", "cocotb"), default=None,
                    help="who clocks the device: the simulation top itself (default when the "
                         "PMEM model, host and CSR master are all compiled and nothing is "
                         "recorded; no call into cocotb on every edge) or a cocotb Clock (the "
                         "default otherwise: the Python models and recorders sample on its "
                         "edges); both give the same cycles (cosim/model_top.py)")
    from trainingcxl.shade import job as shade_job
    shade_job.add_arguments(ap)
    a = ap.parse_args(argv)
    if a.host is None:
        a.host = "python" if a.trace else "cpp"
    elif a.host == "cpp" and a.trace:
        ap.error("--trace records the host action log, which needs --host python")
    if a.csr is None:
        a.csr = "python" if a.trace else "cpp"
    elif a.csr == "cpp" and a.trace:
        ap.error("--trace records each CSR access in the host action log, which needs "
                 "--csr python (the compiled master's completion wait is one job)")
    compiled_only = BenchConfig(pmem=a.pmem, host=a.host, csr=a.csr,
                                trace=str(a.trace) if a.trace else None,
                                stimulus=str(a.stimulus) if a.stimulus else None).compiled_only
    if a.clock is None:
        a.clock = "own" if compiled_only else "cocotb"
    elif a.clock == "own" and not compiled_only:
        ap.error("--clock own needs --pmem cpp --host cpp --csr cpp and no --trace or "
                 "--stimulus: the Python models and the recorders sample on cocotb's clock "
                 "edges")
    if a.batches < 1 or a.crashes < 0 or a.latency < 1 or a.mlp_cycles < 0 or a.lag < 0:
        ap.error("--batches, --latency >= 1; --crashes, --mlp-cycles, --lag >= 0")
    from cosim.media import media_timing
    try:
        a.media_timing = media_timing(a.media, clock_mhz=a.media_clock_mhz, latency=a.latency,
                                      read_latency=a.read_latency,
                                      write_latency=a.write_latency,
                                      read_bandwidth=a.read_bw, write_bandwidth=a.write_bw)
    except ValueError as e:
        ap.error(f"media: {e}")
    if a.crashes > max(0, a.batches - 2):
        ap.error(f"--crashes {a.crashes} needs at least {a.crashes + 2} batches")
    try:
        rows = tuple(int(x) for x in a.rows.split(","))
    except ValueError:
        ap.error(f"--rows must be comma-separated integers, got {a.rows!r}")
    pooling = d.pooling
    a.file_data = None
    if a.data is not None:
        from sw_model.clicklog import ClickLogFormatError
        from sw_model.dlrm import npz_data
        try:
            fn, n_file, ev, rows = npz_data(a.data, a.batch_size)
        except (ClickLogFormatError, ValueError, OSError) as e:
            ap.error(f"--data: {e}")
        if a.batches > n_file:
            ap.error(f"--batches {a.batches}: {a.data} holds {n_file} training batches of "
                     f"{a.batch_size}")
        # the staging layout must hold the longest bag of any batch trained or evaluated
        offs = [o for b in range(1, a.batches + 1) for o in fn(b).offsets] + list(ev.offsets)
        pooling = (0, max([1, *(int(np.diff(o).max(initial=0)) for o in offs)]))
        a.file_data = (fn, ev)
    alphas = (d.alphas * len(rows))[:len(rows)]
    try:
        a.model = DLRMConfig(table_rows=rows, alphas=alphas, emb_dim=a.dim, pooling=pooling,
                             bottom_mlp=(*d.bottom_mlp[:-1], a.dim), batch_size=a.batch_size,
                             lr=a.lr, emb_lr=a.emb_lr, lag_k=a.lag, seed=d.seed,
                             data_seed=d.data_seed)
    except ValueError as e:
        ap.error(str(e))
    return a


def reference_runs(mcfg, batches: int, data, eval_data, log=print, datapath=None) -> dict:
    """Golden model without failures, and float32 embeddings: losses and held-out metrics.
    ``datapath``: spec of a sample cache/sampler (trainingcxl.shade.job), a fresh one per run."""
    from sw_model.dlrm import DLRM, evaluate, make_float_device, make_model_device, train
    out = {}
    for name, make in (("golden", make_model_device), ("float32", make_float_device)):
        t0 = time.monotonic()
        dev = make(mcfg)
        model = DLRM(mcfg)
        dp = None
        if datapath is not None:
            from trainingcxl.shade import job as shade_job
            data = dp = shade_job.build(datapath)
        res = train(dev, model, data, batches, mcfg, data_feedback=dp)
        ev = evaluate(model, dev.float_tables(), eval_data)
        out[name] = dict(losses=res.losses().tolist(), eval=ev,
                         progressive_auc=res.progressive_auc(), model=model,
                         tables=dev.tables() if name == "golden" else None,
                         wall_s=round(time.monotonic() - t0, 1), datapath=dp)
        log(f"  {name:8s} run: eval AUC {ev['auc']:.4f}, logloss {ev['logloss']:.4f} "
            f"({out[name]['wall_s']} s)")
    return out


def main(argv=None) -> int:
    a = _args(argv)
    from cosim import build as cb
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    from trainingcxl.train.tb import TrainParams
    from sw_model.clicklog import ClickData, ClickLogGenerator
    from sw_model.dlrm import DLRM, evaluate, npz_data, synthetic_data

    t_start = time.time()
    cfg = DeviceConfig()
    mcfg = a.model
    a.out.mkdir(parents=True, exist_ok=True)
    crashes = crash_schedule(a.seed, a.batches, a.crashes)
    gen = ClickLogGenerator(mcfg.clicklog())
    if a.file_data is not None:
        data, eval_data = a.file_data
    else:
        data = synthetic_data(mcfg)
        eval_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval")
                                      for b in range(a.eval_batches)])
    dpath = None
    from trainingcxl.shade import job as shade_job
    if shade_job.enabled(a):
        n_data = (a.dataset_batches if a.file_data is None else
                  npz_data(a.data, a.model.batch_size)[1])
        dpath = shade_job.prepare(a, mcfg, data, n_data, a.seed)
        dpath["checkpoints"] = str((a.out / "datapath-checkpoints").resolve())
    print(f"TrainingCXL demo: {a.batches} batches, crash points (batch, fraction) {crashes}",
          flush=True)
    print(f"  media: {a.media_timing.describe()}", flush=True)
    print("building the device simulator (cached after the first run)...", flush=True)
    t0 = time.time()
    bench = BenchConfig(cfg, trace=str(a.trace.resolve()) if a.trace else None,
                        stimulus=str(a.stimulus.resolve()) if a.stimulus else None,
                        pmem=a.pmem, host=a.host, csr=a.csr)
    b = cb.device_build(cfg, own_clock=a.clock == "own")
    print(f"  ready in {time.time() - t0:.0f} s", flush=True)
    res_path = (a.out / "rtl_run.json").resolve()
    spec = TrainParams(bench=bench,
                       model=mcfg, batches=a.batches, crashes=[list(c) for c in crashes],
                       latency=a.latency, media=a.media_timing, mlp_cycles=a.mlp_cycles,
                       seed=a.seed,
                       out=str(res_path),
                       data=str(a.data.resolve()) if a.data is not None else None,
                       progress_every=10**9 if a.quiet else max(1, a.batches // 30),
                       profile=str(a.profile.resolve()) if a.profile else None,
                       datapath=dpath, twin=a.twin)
    for p in (res_path, Path(str(res_path) + ".mlp"), Path(str(res_path) + ".tables.npz")):
        p.unlink(missing_ok=True)
    print("training with the RTL in the loop:", flush=True)
    err = None
    try:
        cb.run(b, "trainingcxl.train.tb", seed=a.seed, capture=False, test_dir=a.out / "sim",
               params=spec,
               extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
    except cb.CosimError as e:
        err = e
    if err is not None or not res_path.exists():
        print(f"the RTL training run failed: {err}", file=sys.stderr)
        return 1
    rtl = json.loads(res_path.read_text())
    model = DLRM(mcfg)
    model.load_bytes(Path(str(res_path) + ".mlp").read_bytes())
    with np.load(str(res_path) + ".tables.npz") as z:
        tables = [z[f"arr_{t}"] for t in range(mcfg.n_tables)]
    from sw_model.fixedpoint import to_float
    rtl_eval = evaluate(model, [to_float(t, cfg.frac_bits) for t in tables], eval_data)
    print("reference runs (golden model without failures, float32 embeddings):", flush=True)
    refs = reference_runs(mcfg, a.batches, data, eval_data, datapath=dpath)
    if dpath is not None:          # the bytes without NDP: the samples the golden run read
        gdp = refs["golden"]["datapath"]
        order = {r.batch: r.ids for r in gdp.log}
        data = lambda b: gdp.store.peek(order[b])
    rep = build_report(a, cfg, mcfg, data, rtl, rtl_eval, refs, crashes, time.time() - t_start)
    rep["command"] = shlex.join(["trainingcxl", "train", *(sys.argv[1:] if argv is None
                                                             else argv)])
    write_report(a.out, rep, refs)
    print(summarize(rep))
    return 0 if rep["twin_equal"] else 1
