"""The training job's report: the summary printed on stdout, ``summary.json``, ``report.md``
and the plots (``loss.png``, ``cycles.png``), from the RTL run's results and the reference runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["PHASES", "build_report", "summarize", "write_report"]

PHASES = ("lookup", "mlp", "update", "snapshot", "commit")


def summarize(rep: dict) -> str:
    r, g, f = rep["rtl"], rep["golden"], rep["float32"]
    cyc = rep["cycles_per_batch"]
    lines = [
        "",
        "TrainingCXL demo: DLRM training with the RTL in the loop",
        f"  model        {rep['model_desc']}",
        f"  run          {rep['batches']} batches, PMEM latency {rep['latency']} cycles, "
        f"host MLP time {rep['mlp_cycles']} cycles/batch, lag bound k = {rep['lag']}",
        f"  media        {rep.get('media', {}).get('timing', 'ideal')}",
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


def _latency(a):
    """The PMEM latency of the run: one number, or read/write when the media differs."""
    m = getattr(a, "media_timing", None)
    if m is None or m.read_latency == m.write_latency:
        return a.latency if m is None else m.read_latency
    return f"{m.read_latency}/{m.write_latency} (read/write)"


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
        batches=a.batches, latency=_latency(a), mlp_cycles=a.mlp_cycles, lag=mcfg.lag_k,
        media=rtl.get("media", {}),
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
          f"Reproduce: `{rep['command']}`.", ""]
    (out / "report.md").write_text("\n".join(md))
