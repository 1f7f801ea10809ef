"""``make demo``: train the default small DLRM with the RTL in the loop, through power failures.

    python -m cosim.train_demo [--batches N] [--crashes K] [--seed S] [--out build/report] ...
    (also: trainingcxl train ...)

1. Builds the device simulator (Verilator, cached by content).
2. Trains ``--batches`` batches of the synthetic click log (or ``--data FILE.npz``) with the
   embeddings on the RTL (cosim/train_tb.py: LOOKUP+LOG, UPDATE, SNAPSHOT, COMMIT through the
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
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

PHASES = ("lookup", "mlp", "update", "snapshot", "commit")


def crash_schedule(seed: int, batches: int, n: int) -> list[tuple[int, float]]:
    """``n`` distinct batches in 2..batches-1 (seeded), each with a fraction in [0, 1)."""
    rng = random.Random(f"demo-schedule-{seed}")
    pool = list(range(2, max(2, batches)))
    picks = sorted(rng.sample(pool, min(n, len(pool))))
    return [(b, round(rng.random(), 4)) for b in picks]


def _args(argv):
    from sw_model.dlrm import DLRMConfig
    d = DLRMConfig()
    ap = argparse.ArgumentParser(prog="python -m cosim.train_demo",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200, help="training batches (default 200)")
    ap.add_argument("--crashes", type=int, default=3, help="power failures (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="crash schedule, PMEM and host seed")
    ap.add_argument("--latency", type=int, default=40, help="PMEM latency in cycles (40)")
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
    ap.add_argument("--trace", type=Path, default=None,
                    help="record every boundary transaction (CXL.mem, media, CSR) as JSON lines "
                         "here (docs/traces.md; large: one line per handshake)")
    from trainingcxl.shade import job as shade_job
    shade_job.add_arguments(ap)
    a = ap.parse_args(argv)
    if a.batches < 1 or a.crashes < 0 or a.latency < 1 or a.mlp_cycles < 0 or a.lag < 0:
        ap.error("--batches, --latency >= 1; --crashes, --mlp-cycles, --lag >= 0")
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


def summarize(rep: dict) -> str:
    r, g, f = rep["rtl"], rep["golden"], rep["float32"]
    cyc = rep["cycles_per_batch"]
    lines = [
        "",
        "TrainingCXL demo: DLRM training with the RTL in the loop",
        f"  model        {rep['model_desc']}",
        f"  run          {rep['batches']} batches, PMEM latency {rep['latency']} cycles, "
        f"host MLP time {rep['mlp_cycles']} cycles/batch, lag bound k = {rep['lag']}",
        "",
        "  held-out loss / AUC                      logloss    AUC",
        f"    RTL run with {len(rep['crashes'])} power failures   "
        f"{r['eval']['logloss']:9.4f} {r['eval']['auc']:8.4f}",
        f"    golden model, no failures          {g['eval']['logloss']:9.4f} "
        f"{g['eval']['auc']:8.4f}",
        f"    float32 embeddings, no failures    {f['eval']['logloss']:9.4f} "
        f"{f['eval']['auc']:8.4f}",
        "",
        "  cycles per batch (mean over batches without a failure)",
        "    " + "  ".join(f"{p} {cyc[p]:.0f}" for p in PHASES) + f"  total {cyc['total']:.0f}",
        f"    snapshot copy in the background: {rep['snapshot_background_mean']:.0f} cycles "
        f"after its completion (mean of {rep['n_snapshots']})",
        "",
        "  link bytes for the embeddings (LOOKUP + UPDATE)",
        f"    with near-data pooling (measured CXL.mem data)   {rep['link_with']:>12,}",
        f"    without (host reads every row, writes back each) {rep['link_without']:>12,}",
        f"    reduction {rep['link_without'] / max(1, rep['link_with']):.1f}x",
        "",
        "  power failures (cycle, batch, phase -> recovered committed batch C, MLP epoch m)",
    ]
    if rep.get("datapath"):
        from trainingcxl.shade import job as shade_job
        lines[-1:-1] = ["  data path of the RTL run: " + shade_job.describe(rep["datapath"]), ""]
    for c in rep["crashes"]:
        t = c["trainer"]
        lines.append(f"    cycle {c['cycle']:>9,}  batch {c['batch']:4d} {c['phase']:8s} -> "
                     f"C = {c['committed']}, m = {c['mlp_epoch'] if c['mlp_slot'] else 'none'}"
                     f", {c['records_rolled_back']} undo records rolled back, "
                     f"{c['recover_cycles']} cycles; redo {t['redone']} batch(es), "
                     f"MLP steps lost {t['mlp_lost']}")
    lines += ["",
              "  RTL equal to the golden model: every completion, host read, recovery and the "
              "final memory image" if rep["twin_equal"] else
              "  RTL DIFFERS from the golden model (see the simulator log)",
              f"  wall time {rep['wall_s']:.0f} s; report {rep['out']}/report.md"]
    return "\n".join(lines)


def main(argv=None) -> int:
    a = _args(argv)
    from cosim import build as cb
    from hw.config import DeviceConfig
    from sw_model.clicklog import ClickData, ClickLogGenerator
    from sw_model.dlrm import DLRM, evaluate, synthetic_data

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
    if shade_job_enabled(a):
        from trainingcxl.shade import job as shade_job
        n_data = a.dataset_batches if a.file_data is None else npz_batches(a)
        dpath = shade_job.prepare(a, mcfg, data, n_data, a.seed)
        dpath["checkpoints"] = str((a.out / "datapath-checkpoints").resolve())
    print(f"TrainingCXL demo: {a.batches} batches, crash points (batch, fraction) {crashes}",
          flush=True)
    print("building the device simulator (cached after the first run)...", flush=True)
    t0 = time.time()
    b = cb.device_build(cfg)
    print(f"  ready in {time.time() - t0:.0f} s", flush=True)
    spec = dict(model={k: getattr(mcfg, k) for k in mcfg.__dataclass_fields__},
                batches=a.batches, crashes=crashes, latency=a.latency,
                mlp_cycles=a.mlp_cycles, seed=a.seed,
                data=str(a.data.resolve()) if a.data is not None else None,
                progress_every=10**9 if a.quiet else max(1, a.batches // 30), datapath=dpath)
    res_path = (a.out / "rtl_run.json").resolve()
    for p in (res_path, Path(str(res_path) + ".mlp"), Path(str(res_path) + ".tables.npz")):
        p.unlink(missing_ok=True)
    print("training with the RTL in the loop:", flush=True)
    err = None
    try:
        cb.run(b, "cosim.train_tb", seed=a.seed, capture=False, test_dir=a.out / "sim",
               extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING",
                          "TCXL_CONFIG": cfg.to_json(), "TCXL_TRAIN": json.dumps(spec),
                          "TCXL_TRAIN_OUT": str(res_path),
                          **({"TCXL_TRAIN_PROFILE": os.environ["TCXL_TRAIN_PROFILE"]}
                             if os.environ.get("TCXL_TRAIN_PROFILE") else {}),
                          **({"TCXL_TRACE": str(a.trace.resolve())} if a.trace else {})})
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
    write_report(a.out, rep, refs)
    print(summarize(rep))
    return 0 if rep["twin_equal"] else 1


def _without_ndp_bytes(mcfg, data, batches: int) -> int:
    """Link bytes if the host gathered rows itself: every looked-up row read, every distinct
    updated row written back, in whole 64 B lines."""
    row_bytes = -(-mcfg.emb_dim * 4 // 64) * 64
    total = 0
    for b in range(1, batches + 1):
        for o, x in data(b).bags:
            x = np.asarray(x)[:int(o[-1])]
            total += row_bytes * (len(x) + len(np.unique(x)))
    return total


def build_report(a, cfg, mcfg, data, rtl, rtl_eval, refs, crashes, wall) -> dict:
    crash_batches = {c["trainer"]["batch"] for c in rtl["crashes"]}
    crash_batches |= {c["batch"] for c in rtl["crashes"]}
    per = [v for b, v in rtl["phase_cycles"].items()
           if int(b) >= 1 and int(b) not in crash_batches and "commit" in v]
    cyc = {p: float(np.mean([v.get(p, 0) for v in per])) if per else 0.0 for p in PHASES}
    cyc["total"] = sum(cyc[p] for p in PHASES)
    bg = list(rtl["snap_background"].values())
    link_with = sum(v for k, v in rtl["link"].items() if k in ("lookup", "update"))
    losses = np.full(a.batches, np.nan)
    for b, x in rtl["losses"]:
        losses[b - 1] = x
    return dict(
        batches=a.batches, latency=a.latency, mlp_cycles=a.mlp_cycles, lag=mcfg.lag_k,
        seed=a.seed, crash_schedule=crashes, out=str(a.out),
        model_desc=(f"{mcfg.n_tables} tables {list(mcfg.table_rows)} x dim {mcfg.emb_dim}, "
                    f"batch {mcfg.batch_size}, pooling {mcfg.pooling[0]}..{mcfg.pooling[1]}, "
                    f"MLP bottom {mcfg.n_dense}-{'-'.join(map(str, mcfg.bottom_mlp))}, top "
                    f"{mcfg.emb_dim + mcfg.n_interactions}-{'-'.join(map(str, mcfg.top_mlp))} "
                    f"({mcfg.n_params} params)"),
        rtl=dict(eval=rtl_eval, losses=losses.tolist(), loss_log=rtl["losses"],
                 cycles=rtl["cycles"], wall_s=rtl["wall_s"]),
        golden={k: v for k, v in refs["golden"].items()
                if k not in ("model", "tables", "datapath")},
        float32={k: v for k, v in refs["float32"].items()
                 if k not in ("model", "tables", "datapath")},
        datapath=rtl.get("datapath"),
        cycles_per_batch=cyc, snapshot_background_mean=float(np.mean(bg)) if bg else 0.0,
        n_snapshots=len(bg), link=rtl["link"], link_with=int(link_with),
        link_without=_without_ndp_bytes(mcfg, data, a.batches),
        crashes=rtl["crashes"], twin_equal=bool(rtl["twin_checked"]), stats=rtl["stats"],
        wall_s=wall)


def write_report(out: Path, rep: dict, refs: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(y, w=10):
        y = np.asarray(y, dtype=float)
        w = max(1, min(w, len(y)))             # "same" returns max(len(y), w) values
        k = np.ones(w) / w
        ok = ~np.isnan(y)
        num = np.convolve(np.where(ok, y, 0), k, "same")
        den = np.convolve(ok.astype(float), k, "same")
        return num / np.maximum(den, 1e-9)

    x = np.arange(1, rep["batches"] + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(x, smooth(rep["rtl"]["losses"]), label="RTL, with power failures")
    ax.plot(x, smooth(rep["golden"]["losses"]), label="golden model, no failures", ls="--")
    ax.plot(x, smooth(rep["float32"]["losses"]), label="float32 embeddings", ls=":")
    for i, c in enumerate(rep["crashes"]):
        ax.axvline(c["batch"], color="red", alpha=0.6,
                   label="power failure" if i == 0 else None)
    ax.set_xlabel("batch")
    ax.set_ylabel("training loss (moving mean of 10)")
    ax.set_title("DLRM training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=110)
    plt.close(fig)

    cyc = rep["cycles_per_batch"]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    left = 0.0
    for p in PHASES:
        ax.barh([0], [cyc[p]], left=left, label=p)
        left += cyc[p]
    ax.set_yticks([])
    ax.set_xlabel("cycles per batch (mean, batches without a failure)")
    ax.legend(ncol=5, loc="upper center", bbox_to_anchor=(0.5, 1.35), frameon=False)
    fig.tight_layout()
    fig.savefig(out / "cycles.png", dpi=110)
    plt.close(fig)

    (out / "summary.json").write_text(json.dumps(rep, indent=1, default=float))
    md = ["# TrainingCXL demo report", "", "```", summarize(rep).strip("\n"), "```", "",
          "![loss](loss.png)", "", "![cycles](cycles.png)", "",
          "Reproduce: `make demo` (or `python -m cosim.train_demo --seed "
          f"{rep['seed']} --batches {rep['batches']}`).", ""]
    (out / "report.md").write_text("\n".join(md))


def shade_job_enabled(a) -> bool:
    from trainingcxl.shade import job as shade_job
    return shade_job.enabled(a)


def npz_batches(a) -> int:
    from sw_model.dlrm import npz_data
    return npz_data(a.data, a.model.batch_size)[1]


if __name__ == "__main__":
    sys.exit(main())
