"""The system-model report: Markdown + PNG plots + JSON in ``out``.

Sections: the headline against the paper, the cycle-formula validation on held-out RTL runs,
time and energy per phase, speedup and energy saving per workload and baseline, the tornado
chart, the near-data crossover (pooling, dim, batch), scaling (devices, tables beyond one
device, batch), what the paper's figure would need, and the parameter table with sources.
"""
from __future__ import annotations

import json
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trainingcxl.system import analysis, cycles, model  # noqa: E402
from trainingcxl.system.params import CLOCKS, PARAMS, defaults  # noqa: E402

__all__ = ["write_report", "param_table", "validation_table"]

PHASE_COLORS = {
    "indices": "#9e9e9e", "lookup": "#1f77b4", "to_gpu": "#aec7e8", "mlp": "#2ca02c",
    "from_gpu": "#98df8a", "log": "#d62728", "update": "#ff7f0e", "mlp_checkpoint": "#9467bd",
    "checkpoint": "#9467bd", "commit": "#8c564b", "snapshot": "#e377c2", "log_drain": "#ff9896",
    # energy components
    "cpu": "#1f77b4", "gpu": "#2ca02c", "pmem": "#d62728", "dram": "#17becf", "links": "#7f7f7f",
    "device": "#ff7f0e",
}


def _fmt_s(x):
    return f"{x * 1e3:.2f}"


def param_table() -> str:
    lines = ["| parameter | value | unit | kind | source |", "|---|---|---|---|---|"]
    for p in PARAMS.values():
        v = f"{p.value:.4g}"
        lines.append(f"| `{p.name}` | {v} | {p.unit} | {p.kind} | {p.source} |")
    for name, c in CLOCKS.items():
        lines.append(f"| `clock_hz` ({name}) | {c.value:.4g} | Hz | {c.kind} | {c.source} |")
    return "\n".join(lines)


def validation_table(rows) -> str:
    out = ["| point | set | command | latency | dim | bags x pooling | rows | distinct | "
           "snapshot B | RTL cycles | predicted | error |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['point']} | {r['role']} | {r['command']} | {r['latency']} | {r['dim']} | "
                   f"{r['n_bags']} x {r['pooling']} | {r['rows_desc']} | {r['distinct']} | "
                   f"{r['snap_bytes']} | {r['measured']:.0f} | {r['predicted']:.0f} | "
                   f"{r['error']:+.1%} |")
    return "\n".join(out)


def _bar_phases(ax, results, attr, scale, unit):
    names = list(results)
    left = [0.0] * len(names)
    seen = set()
    for i, s in enumerate(names):
        d = getattr(results[s], attr)
        for ph, v in d.items():
            lab = ph if ph not in seen else None
            seen.add(ph)
            ax.barh(i, v * scale, left=left[i], color=PHASE_COLORS.get(ph, "#bcbd22"),
                    label=lab, edgecolor="white", linewidth=0.5)
            left[i] += v * scale
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel(unit)


def _plot_phases(comps, out, clock):
    n = len(comps)
    fig, axes = plt.subplots(n, 2, figsize=(13, 2.4 * n + 0.6), squeeze=False)
    for k, (wname, c) in enumerate(comps.items()):
        _bar_phases(axes[k][0], c["results"], "time", 1e3, "ms per step")
        axes[k][0].set_title(f"{wname}: time per step by phase ({clock})", fontsize=9)
        _bar_phases(axes[k][1], c["results"], "energy", 1.0, "J per step")
        axes[k][1].set_title(f"{wname}: energy per step by component ({clock})", fontsize=9)
    h, lab = [], []
    for ax in axes.flat:
        for hh, ll in zip(*ax.get_legend_handles_labels()):
            if ll not in lab:
                h.append(hh)
                lab.append(ll)
    fig.legend(h, lab, loc="lower center", ncol=8, fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _plot_speedups(allc, out):
    clocks = list(allc)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    wnames = list(allc[clocks[0]])
    width = 0.8 / (len(model.BASELINES) * len(clocks))
    for j, clock in enumerate(clocks):
        for i, b in enumerate(model.BASELINES):
            k = j * len(model.BASELINES) + i
            xs = [x + k * width for x in range(len(wnames))]
            axes[0].bar(xs, [allc[clock][w]["speedup"][b] for w in wnames], width,
                        label=f"vs {b} ({clock})")
            axes[1].bar(xs, [100 * allc[clock][w]["energy_saving"][b] for w in wnames], width,
                        label=f"vs {b} ({clock})")
    for ax in axes:
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(wnames))], wnames)
    axes[0].axhline(analysis.PAPER_SPEEDUP, color="k", ls="--", lw=1, label="paper 5.2x")
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup of TrainingCXL (x)")
    axes[1].axhline(100 * analysis.PAPER_ENERGY_SAVING, color="k", ls="--", lw=1,
                    label="paper 76 %")
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].set_ylabel("energy saving of TrainingCXL (%)")
    axes[1].set_ylim(bottom=max(-300, axes[1].get_ylim()[0]))
    axes[0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _plot_tornado(base, rows, out, title):
    rows = rows[:14][::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        ax.barh(i, r["low"] - base, left=base, color="#1f77b4")
        ax.barh(i, r["high"] - base, left=base, color="#ff7f0e")
    ax.set_yticks(range(len(rows)), [f"{r['param']} ({r['kind']})" for r in rows], fontsize=7)
    ax.axvline(base, color="k", lw=1)
    ax.set_xlabel("speedup vs pmem-log (blue: parameter x0.5, orange: x1.5)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _plot_crossover(cross, out):
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for j, (axis, rows) in enumerate(cross.items()):
        xs = [r[axis] for r in rows]
        a = axes[0][j]
        a.plot(xs, [r["near_bytes"] / 1e6 for r in rows], "o-", label="near-data (TrainingCXL)")
        a.plot(xs, [r["host_bytes"] / 1e6 for r in rows], "s-", label="host gather over CXL")
        a.set_xlabel(axis)
        a.set_ylabel("CXL link MB per step (embeddings)")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.legend(fontsize=7)
        b = axes[1][j]
        b.plot(xs, [r["speedup_vs_cxl_host"] for r in rows], "o-", label="vs cxl-host")
        b.plot(xs, [r["speedup_vs_pmem_log"] for r in rows], "s-", label="vs pmem-log")
        b.axhline(1.0, color="grey", lw=0.8)
        b.set_xlabel(axis)
        b.set_ylabel("step-time speedup of TrainingCXL")
        b.set_xscale("log", base=2)
        b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _plot_scaling(dev, rows_s, batch, out):
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot([r["devices"] for r in dev], [r["speedup"] for r in dev], "o-")
    axes[0].set_xlabel("devices behind one CXL switch")
    axes[0].set_ylabel("speedup vs pmem-log (1 host)")
    axes[1].plot([r["rows"] for r in rows_s], [r["time"] * 1e3 for r in rows_s], "o-")
    for r in rows_s:
        axes[1].annotate(f"{r['devices']} dev", (r["rows"], r["time"] * 1e3), fontsize=7)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("rows per table (sharded over devices)")
    axes[1].set_ylabel("TrainingCXL ms per step")
    axes[2].plot([r["batch"] for r in batch], [r["speedup"] for r in batch], "o-")
    axes[2].set_xscale("log", base=2)
    axes[2].set_xlabel("batch")
    axes[2].set_ylabel("speedup vs pmem-log")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _gmean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs and min(xs) > 0 else float("nan")


def write_report(workloads, out: pathlib.Path, *, clocks=("fpga", "asic"), primary="asic",
                 focus=None, log=print) -> dict:
    """Run every study on ``workloads`` and write ``report.md``, plots and ``system.json``."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    f = cycles.default_formulas()
    doc = cycles.load_data()
    val = cycles.validate(doc, f)
    fitrows = cycles.validate(doc, f, role="fit")
    allc = {c: {w.name: model.compare(w, defaults(c), formulas=f) for w in workloads}
            for c in clocks}
    focus = focus or workloads[0]
    p = defaults(primary)
    base, torn = analysis.tornado(focus, p, formulas=f)
    cross = {
        "pooling": analysis.crossover(focus, p, "pooling", [1, 2, 4, 8, 16, 32, 64, 100],
                                      formulas=f),
        "dim": analysis.crossover(focus, p, "dim", [16, 32, 64, 128], formulas=f),
        "batch": analysis.crossover(focus, p, "batch", [256, 512, 1024, 2048, 4096, 8192],
                                    formulas=f),
    }
    dev = analysis.scaling_devices(focus, p, formulas=f)
    rows_s = analysis.scaling_rows(focus, p, formulas=f)
    batch = analysis.scaling_batch(focus, p, formulas=f)
    whatif = {}
    variants = [("RTL as built", {}),
                ("+ coalescing UPDATE", {"update_coalesced": 1}),
                ("+ unbounded record buffer", {"update_coalesced": 1,
                                               "log_buffer_lines": 1e15}),
                ("+ staging in device DRAM", {"update_coalesced": 1, "log_buffer_lines": 1e15,
                                              "staging_dram": 1})]
    for label, change in variants:
        pv = defaults(primary)
        pv.update(change)
        whatif[label] = {w.name: model.compare(w, pv, formulas=f) for w in workloads}
    need_params = ["cpu_ns_per_row", "pmem_persist_latency_ns", "cpu_misses_per_core",
                   "pmem_read_bw", "pmem_write_bw", "gpu_efficiency"]
    need = {w.name: {n: analysis.needed_for(w, p, n, formulas=f) for n in need_params}
            for w in workloads}

    _plot_phases(allc[primary], out / "phases.png", primary)
    _plot_speedups(allc, out / "speedup.png")
    _plot_tornado(base, torn, out / "tornado.png",
                  f"{focus.name}, {primary} clock: speedup {base:.2f}x vs pmem-log")
    _plot_crossover(cross, out / "crossover.png")
    _plot_scaling(dev, rows_s, batch, out / "scaling.png")

    md = []
    md.append("# TrainingCXL system model\n")
    runs = "".join(f"; points {a['points'][0]}-{a['points'][-1]} added with `{a['command']}` "
                   f"on {a['date']}, git {a['git_commit'][:10]}" for a in doc.get("appended", []))
    md.append("One DLRM training step per system, device time from cycle formulas fitted to RTL "
              "measurements (`trainingcxl/system/data/rtl_cycles.json`, measured with "
              f"`{doc['command']}` on {doc['date']}, git {doc['git_commit'][:10]}{runs}), every "
              "other parameter from the table at the end. docs/system.md explains the model.\n")
    md.append("## Headline against the paper\n")
    md.append("Paper (Kwon et al., IEEE Micro 2023, arXiv:2301.07492): **5.2x** training "
              "performance and **76 %** energy saving against \"modern PMEM-based "
              "recommendation systems\". The model's counterpart of that baseline is "
              "`pmem-log` (host PMEM, CPU embeddings, GPU MLP, synchronous undo logging + MLP "
              "copy per batch); `pmem-ckpt` checkpoints periodically instead.\n")
    md.append("| clock | workload | speedup vs pmem-log (paper 5.2x) | energy saving vs "
              "pmem-log (paper 76 %) | vs pmem-ckpt | vs cxl-host | vs dram |")
    md.append("|---|---|---|---|---|---|---|")
    for c in clocks:
        for wn, cc in allc[c].items():
            s, e = cc["speedup"], cc["energy_saving"]
            md.append(f"| {c} ({CLOCKS[c].value / 1e6:g} MHz) | {wn} | **{s['pmem-log']:.2f}x** | "
                      f"**{e['pmem-log']:+.0%}** | {s['pmem-ckpt']:.2f}x / {e['pmem-ckpt']:+.0%} "
                      f"| {s['cxl-host']:.2f}x / {e['cxl-host']:+.0%} | {s['dram']:.2f}x / "
                      f"{e['dram']:+.0%} |")
        gm = _gmean(cc["speedup"]["pmem-log"] for cc in allc[c].values())
        md.append(f"| {c} | geometric mean | **{gm:.2f}x** | | | | |")
    md.append("")
    md.append("## Validation of the cycle formulas on held-out RTL runs\n")
    errs = [abs(r["error"]) for r in val]
    per_set = "; ".join(
        f"`{role}` {sum(1 for r in val if r['role'] == role) // 4} points, worst "
        f"{max(abs(r['error']) for r in val if r['role'] == role):.1%}"
        for role in cycles.VALIDATION_ROLES if any(r["role"] == role for r in val))
    md.append(f"Fitted on {len(fitrows) // 4} RTL points, validated on {len(val) // 4} points "
              f"the fit never saw ({per_set}; docs/system.md says when each set was chosen): "
              f"worst |error| **{max(errs):.1%}**, mean {sum(errs) / len(errs):.1%}, "
              f"{sum(e <= 0.05 for e in errs)} of {len(errs)} within ±5 % (target ±5 %). Fit "
              f"points: worst |error| {max(abs(r['error']) for r in fitrows):.1%}.\n")
    md.append(validation_table(val) + "\n")
    md.append("Fitted coefficients: `" + json.dumps(f.as_dict()) + "`\n")
    md.append(f"## Time and energy per step by phase ({primary} clock)\n")
    md.append("![phases](phases.png)\n")
    for wn, cc in allc[primary].items():
        md.append(f"**{wn}** (ms per step; J per step)\n")
        phases = []
        for r in cc["results"].values():
            phases += [k for k in r.time if k not in phases]
        md.append("| system | " + " | ".join(phases) + " | total ms | energy J |")
        md.append("|---|" + "---|" * (len(phases) + 2))
        for s, r in cc["results"].items():
            md.append(f"| {s} | " + " | ".join(_fmt_s(r.time[k]) if k in r.time else ""
                                                for k in phases)
                      + f" | {_fmt_s(r.total_time)} | {r.total_energy:.2f} |")
        notes = cc["results"]["trainingcxl"].notes
        if notes:
            md.append("\n" + "; ".join(notes) + "\n")
        md.append("")
    md.append("## Speedup and energy saving across workloads\n")
    md.append("![speedup](speedup.png)\n")
    md.append(f"## Sensitivity ({focus.name}, {primary} clock)\n")
    md.append(f"Speedup vs pmem-log {base:.2f}x; each parameter at 0.5x and 1.5x its value.\n")
    md.append("![tornado](tornado.png)\n")
    md.append("| parameter | kind | x0.5 | x1.5 |")
    md.append("|---|---|---|---|")
    for r in torn:
        md.append(f"| `{r['param']}` | {r['kind']} | {r['low']:.2f}x | {r['high']:.2f}x |")
    md.append("")
    md.append(f"## Crossover: where near-data processing loses ({focus.name}, {primary})\n")
    md.append("Link bytes: near-data (offsets and index lists written once, pooled outputs "
              "and gradients in whole lines, descriptors and completions) against a host "
              "gathering the rows over the same CXL link (every looked-up row read, every "
              "distinct row written back). Time: TrainingCXL against `cxl-host` (same link, "
              "no near-data processing) and `pmem-log`.\n")
    md.append("![crossover](crossover.png)\n")
    for axis, rows in cross.items():
        bw = analysis.first_win(rows, axis, "bytes_ratio")
        tw = analysis.first_win(rows, axis, "speedup_vs_cxl_host")
        def _from(v):
            return "never in the swept range" if v is None else f"from {axis} = {v} on"
        md.append(f"- **{axis}** (swept {rows[0][axis]}..{rows[-1][axis]}): near-data moves "
                  f"fewer link bytes {_from(bw)}; TrainingCXL is faster than cxl-host "
                  f"{_from(tw)}.")
        md.append("")
        md.append(f"| {axis} | near-data MB | host-gather MB | host/near | TrainingCXL ms | "
                  f"cxl-host ms | pmem-log ms |")
        md.append("|---|---|---|---|---|---|---|")
        for r in rows:
            md.append(f"| {r[axis]} | {r['near_bytes'] / 1e6:.1f} | {r['host_bytes'] / 1e6:.1f} "
                      f"| {r['bytes_ratio']:.2f} | {_fmt_s(r['t_trainingcxl'])} | "
                      f"{_fmt_s(r['t_cxl_host'])} | {_fmt_s(r['t_pmem_log'])} |")
        md.append("")
    md.append(f"## Scaling ({focus.name}, {primary})\n")
    md.append("![scaling](scaling.png)\n")
    md.append("| devices behind a CXL switch | ms per step | speedup vs pmem-log | link MB |")
    md.append("|---|---|---|---|")
    for r in dev:
        md.append(f"| {r['devices']} | {_fmt_s(r['time'])} | {r['speedup']:.2f}x | "
                  f"{r['link_bytes'] / 1e6:.1f} |")
    md.append("")
    md.append("| rows per table | table bytes | devices (sharded) | ms per step | speedup vs "
              "pmem-log | fits one host's PMEM |")
    md.append("|---|---|---|---|---|---|")
    for r in rows_s:
        md.append(f"| {r['rows']:.0e} | {r['table_bytes'] / 1e12:.2f} TB | {r['devices']} | "
                  f"{_fmt_s(r['time'])} | {r['speedup']:.2f}x | {r['host_pmem_fits']} |")
    md.append("")
    md.append("| batch | speedup vs pmem-log | energy saving | TrainingCXL us per sample |")
    md.append("|---|---|---|---|")
    for r in batch:
        md.append(f"| {r['batch']} | {r['speedup']:.2f}x | {r['energy_saving']:+.0%} | "
                  f"{r['time_per_sample_us']:.2f} |")
    md.append("")
    md.append(f"## Design what-ifs ({primary} clock; not RTL-validated)\n")
    md.append("Cumulative changes to the device, each outside what the RTL does today: an "
              "UPDATE that coalesces gradients and writes each distinct row once; a record "
              "buffer large enough that every undo record drains behind the transfers and the "
              "MLP; staging (index lists, outputs, gradients) in device DRAM instead of the "
              "PMEM media. Speedup / energy saving against pmem-log.\n")
    md.append("| variant | " + " | ".join(w.name for w in workloads) + " |")
    md.append("|---|" + "---|" * len(workloads))
    for label, by_w in whatif.items():
        md.append(f"| {label} | " + " | ".join(
            f"{by_w[w.name]['speedup']['pmem-log']:.2f}x / "
            f"{by_w[w.name]['energy_saving']['pmem-log']:+.0%}" for w in workloads) + " |")
    md.append("")
    md.append(f"## What the paper's 5.2x would need ({primary} clock)\n")
    md.append("Factor on one parameter (all others fixed) at which the speedup against "
              "pmem-log reaches 5.2x; `none` = not within 0.001x..1000x.\n")
    md.append("| workload | " + " | ".join(f"`{n}`" for n in need_params) + " |")
    md.append("|---|" + "---|" * len(need_params))
    for wn, d in need.items():
        md.append(f"| {wn} | " + " | ".join("none" if v is None else f"x{v:.3g}"
                                            for v in d.values()) + " |")
    md.append("")
    md.append("## Parameters (fixed before the comparison)\n")
    md.append(param_table() + "\n")
    (out / "report.md").write_text("\n".join(md) + "\n")
    summary = {
        "clocks": {c: CLOCKS[c].value for c in clocks},
        "comparison": {c: {wn: {"speedup": cc["speedup"], "energy_saving": cc["energy_saving"],
                                "time": {s: r.time for s, r in cc["results"].items()},
                                "energy": {s: r.energy for s, r in cc["results"].items()},
                                "link_bytes": {s: r.link_bytes
                                               for s, r in cc["results"].items()}}
                           for wn, cc in allc[c].items()} for c in clocks},
        "validation": val, "formulas": f.as_dict(), "tornado": {"base": base, "rows": torn},
        "crossover": cross, "scaling": {"devices": dev, "rows": rows_s, "batch": batch},
        "needed_for_paper": need,
        "what_if": {label: {wn: {"speedup": c["speedup"], "energy_saving": c["energy_saving"]}
                            for wn, c in by_w.items()} for label, by_w in whatif.items()},
    }
    (out / "system.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"wrote {out / 'report.md'}")
    return summary
