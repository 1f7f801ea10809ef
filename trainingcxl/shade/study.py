"""``make shade`` / ``trainingcxl shade``: SHADE against LRU, LFU, random, an importance cache
and Belady, with 1 and several workers, on the synthetic click log or an npz file.

For each worker count W:

* one run with the ``shuffle`` sampler (uniform, the usual data loader): its access sequence
  is replayed into every policy at every cache size;
* one run per cache size with the ``importance`` sampler driven by a SHADE cache of that size
  (SHADE's sampler orders each epoch's cached samples first, so the sequence depends on the
  cache): the same sequence is replayed into every policy of that size (one run, the same
  sequence of epochs).

Every run trains the DLRM of docs/dlrm.md from the same initial weights on the golden-model
device (or float32 embeddings with ``--device float32``) and is evaluated on the held-out set.
Writes ``report.md``, ``study.json`` and plots under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from .datapath import DataPath, DataPathConfig, simulate
from .policies import belady_hits, make_policy
from .store import IOModel, SampleStore, write_store

POLICIES = ("shade", "lru", "lfu", "random", "icache")


def _train(mcfg, device_kind, dp, n_batches, eval_data):
    from sw_model.dlrm import DLRM, evaluate, make_float_device, make_model_device, train
    dev = (make_model_device if device_kind == "golden" else make_float_device)(mcfg)
    model = DLRM(mcfg)
    t0 = time.monotonic()
    res = train(dev, model, dp, n_batches, mcfg, data_feedback=dp)
    ev = evaluate(model, dev.float_tables(), eval_data)
    return dict(auc=ev["auc"], logloss=ev["logloss"], train_s=round(time.monotonic() - t0, 1),
                final_loss=float(np.nanmean(res.losses()[-50:])))


def _workers_view(dp, world):
    """Per worker: (trace, observations, capacity-independent info)."""
    if world == 1:
        return [dict(trace=dp.trace, observations=dp.observations, stats=dp.stats(False))]
    return [dict(trace=s["trace"], observations=s["observations"], stats=s) for s in dp.stats()]


def _policy_results(store, views, size_pct, n, world, per_epoch, seed):
    """Hit ratio, bytes and modelled I/O time per epoch of every policy (and Belady) on the
    recorded sequences of every worker at ``size_pct``."""
    cap = int(round(size_pct / 100 * n / world))
    sizes = np.array([store.sample_bytes(i) for i in range(n)])
    out = {}
    for name in (*POLICIES, "belady"):
        hits_all, bytes_all, epoch_s = 0, 0, None
        accesses = 0
        for r, v in enumerate(views):
            tr = np.asarray(v["trace"], dtype=np.int64)
            if name == "belady":
                h = belady_hits(tr, cap)
            else:
                h = simulate(make_policy(name, cap, seed=seed * 1000 + r), tr, v["observations"])
            miss = tr[~h]
            b = sizes[miss]
            t = store.io.latency_s + b / store.io.bandwidth
            ep = np.zeros(int(np.ceil(len(tr) / per_epoch)))
            np.add.at(ep, np.flatnonzero(~h) // per_epoch, t)
            # workers fetch in parallel: an epoch's I/O time is its slowest worker's
            epoch_s = ep if epoch_s is None else np.maximum(epoch_s, ep)
            hits_all += int(h.sum())
            bytes_all += int(b.sum())
            accesses += len(tr)
        out[name] = dict(hit_ratio=hits_all / accesses, hits=hits_all, accesses=accesses,
                         bytes=bytes_all, io_s_per_epoch=[float(x) for x in epoch_s])
    return out


def _run(store, store_dir, mcfg, args, eval_data, world, sampler, size):
    from .distributed import DistributedDataPath
    cfg = DataPathConfig(sampler=sampler,
                         cache="shade" if sampler == "importance" and size else "none",
                         cache_size=size, batch_size=mcfg.batch_size, seed=args.seed,
                         rep_factor=args.rep_factor, world=world)
    n_batches = args.epochs * ((store.n // world) // (mcfg.batch_size // world))
    if world == 1:
        dp = DataPath(SampleStore(store_dir, store.io), cfg)
        tr = _train(mcfg, args.device, dp, n_batches, eval_data)
        views = _workers_view(dp, 1)
    else:
        with DistributedDataPath(store_dir, cfg, world, store.io) as dp:
            tr = _train(mcfg, args.device, dp, n_batches, eval_data)
            views = _workers_view(dp, world)
    per_epoch = (store.n // world) // (mcfg.batch_size // world) * (mcfg.batch_size // world)
    imp = views[0]["stats"]["importance"]
    distinct = [len(set().union(*(v["trace"][e * per_epoch:(e + 1) * per_epoch]
                                  for v in views))) for e in range(args.epochs)]
    return dict(train=tr, views=views, per_epoch=per_epoch, importance=imp,
                distinct_per_epoch=distinct)


def run_study(args) -> dict:
    from sw_model.clicklog import ClickData, ClickLogGenerator, load_npz
    from sw_model.dlrm import DLRMConfig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    d = DLRMConfig()
    if args.data is not None:
        full = load_npz(args.data)
        n_train = int(full.n * 0.9)
        train_data, eval_data = full.slice(0, n_train), full.slice(n_train, full.n)
        rows = tuple(int(r) for r in full.table_rows)
        lens = [int(np.diff(o).max(initial=0)) for o in full.offsets]
        mcfg = DLRMConfig(table_rows=rows, alphas=(d.alphas * len(rows))[:len(rows)],
                          pooling=(0, max(1, *lens)), lag_k=d.lag_k)
        source = str(args.data)
    else:
        mcfg = d
        gen = ClickLogGenerator(mcfg.clicklog())
        train_data = gen.generate(args.samples // mcfg.batch_size, mcfg.batch_size)
        eval_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval")
                                      for b in range(args.eval_samples // mcfg.batch_size)])
        source = f"synthetic click log (seed {mcfg.data_seed})"
    store_dir = out / "store"
    shutil.rmtree(store_dir, ignore_errors=True)
    write_store(train_data, store_dir, args.shard_size)
    store = SampleStore(store_dir, IOModel(args.latency_us * 1e-6, args.bandwidth_mb * 1e6))
    store.verify()
    n = store.n
    rep = dict(source=source, n_samples=n, n_eval=eval_data.n, epochs=args.epochs,
               sizes=list(args.sizes), workers=list(args.workers), device=args.device,
               seed=args.seed, rep_factor=args.rep_factor,
               io=dict(latency_us=args.latency_us, bandwidth_mb=args.bandwidth_mb),
               batch_size=mcfg.batch_size, runs={})
    t_all = time.monotonic()
    for world in args.workers:
        key = f"W{world}"
        res = rep["runs"][key] = dict(shuffle={}, importance={})
        log(f"W={world}: shuffle sampler")
        r = _run(store, store_dir, mcfg, args, eval_data, world, "shuffle", 0)
        res["shuffle"]["train"] = r["train"]
        res["shuffle"]["importance"] = r["importance"]
        res["shuffle"]["distinct_per_epoch"] = r["distinct_per_epoch"]
        for size in args.sizes:
            res["shuffle"][str(size)] = _policy_results(store, r["views"], size, n, world,
                                                        r["per_epoch"], args.seed)
        log(f"  AUC {r['train']['auc']:.4f} ({r['train']['train_s']} s); LRU "
            + ", ".join(f"{s}% {res['shuffle'][str(s)]['lru']['hit_ratio']:.3f}"
                        for s in args.sizes))
        r = _run(store, store_dir, mcfg, args, eval_data, world, "importance", 0)
        res["importance_nocache"] = dict(train=r["train"], importance=r["importance"],
                                         distinct_per_epoch=r["distinct_per_epoch"])
        log(f"  importance, no cache: AUC {r['train']['auc']:.4f} ({r['train']['train_s']} s)")
        for size in args.sizes:
            r = _run(store, store_dir, mcfg, args, eval_data, world, "importance", size)
            pr = _policy_results(store, r["views"], size, n, world, r["per_epoch"], args.seed)
            res["importance"][str(size)] = dict(train=r["train"], importance=r["importance"],
                                                distinct_per_epoch=r["distinct_per_epoch"],
                                                policies=pr)
            log(f"  importance + SHADE {size}%: AUC {r['train']['auc']:.4f} "
                f"({r['train']['train_s']} s); hit ratio SHADE {pr['shade']['hit_ratio']:.3f}"
                f" LRU {pr['lru']['hit_ratio']:.3f} Belady {pr['belady']['hit_ratio']:.3f}")
    rep["wall_s"] = round(time.monotonic() - t_all, 1)
    (out / "study.json").write_text(json.dumps(rep, indent=1))
    write_report(out, rep)
    return rep


def log(msg):
    print(msg, flush=True)


def _ratio(a, b):
    return a / b if b else float("inf")


def tables(rep) -> list[str]:
    md = []
    for key, res in rep["runs"].items():
        world = int(key[1:])
        md += [f"### {world} worker{'s' if world > 1 else ''}", "",
               "Importance sampler driven by a SHADE cache (one run per size; every policy "
               "replayed on that run's sequence):", "",
               "| cache | SHADE | LRU | LFU | random | iCache-like | Belady | SHADE/LRU | "
               "SHADE / LRU on shuffle | AUC | log loss | ΔAUC vs shuffle |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        sh = res["shuffle"]["train"]
        for size in rep["sizes"]:
            r = res["importance"][str(size)]
            p = r["policies"]
            lru_shuffle = res["shuffle"][str(size)]["lru"]["hit_ratio"]
            md.append(f"| {size}% | " + " | ".join(f"{p[k]['hit_ratio']:.4f}" for k in
                                                  (*POLICIES, "belady"))
                      + f" | {_ratio(p['shade']['hit_ratio'], p['lru']['hit_ratio']):.2f}× | "
                      + f"{_ratio(p['shade']['hit_ratio'], lru_shuffle):.1f}× | "
                      f"{r['train']['auc']:.4f} | {r['train']['logloss']:.4f} | "
                      f"{r['train']['auc'] - sh['auc']:+.4f} |")
        nc = res["importance_nocache"]["train"]
        md += ["", "SHADE/LRU: both on the same sequence (the importance run). SHADE / LRU on "
               "shuffle: the SHADE cache of the importance run over LRU in the shuffle run "
               "(different runs: each policy with its own sampler, the paper's comparison). "
               f"Importance sampler without a cache (weighted draws only, no hit-first order): "
               f"AUC {nc['auc']:.4f}, log loss {nc['logloss']:.4f} "
               f"(ΔAUC vs shuffle {nc['auc'] - sh['auc']:+.4f})."]
        md += ["", f"Shuffle sampler (one run, AUC {sh['auc']:.4f}, log loss "
               f"{sh['logloss']:.4f}; every policy replayed on its sequence):", "",
               "| cache | SHADE | LRU | LFU | random | iCache-like | Belady | SHADE/LRU |",
               "|---|---|---|---|---|---|---|---|"]
        for size in rep["sizes"]:
            p = res["shuffle"][str(size)]
            md.append(f"| {size}% | " + " | ".join(f"{p[k]['hit_ratio']:.4f}" for k in
                                                  (*POLICIES, "belady"))
                      + f" | {_ratio(p['shade']['hit_ratio'], p['lru']['hit_ratio']):.2f}× |")
        md += ["", "Bytes fetched from storage (MB, whole run) and modelled I/O time per epoch "
               "(s, mean over epochs, slowest worker):", "",
               "| sampler, cache | " + " | ".join(f"{k}" for k in (*POLICIES, "belady")) + " |",
               "|---|" + "---|" * (len(POLICIES) + 1)]
        for size in rep["sizes"]:
            for name, p in (("importance", res["importance"][str(size)]["policies"]),
                            ("shuffle", res["shuffle"][str(size)])):
                md.append(f"| {name}, {size}% | " + " | ".join(
                    f"{p[k]['bytes'] / 1e6:.2f} MB, {np.mean(p[k]['io_s_per_epoch']):.2f} s"
                    for k in (*POLICIES, "belady")) + " |")
        imp = res["importance"][str(rep["sizes"][0])]
        md += ["", f"Importance at the end (smallest-cache run): the top 1/5/10/20 % of samples "
               f"by weight hold {imp['importance']['top1']:.3f} / "
               f"{imp['importance']['top5']:.3f} / {imp['importance']['top10']:.3f} / "
               f"{imp['importance']['top20']:.3f} of the sampling probability (uniform: 0.01 / "
               f"0.05 / 0.10 / 0.20); largest/smallest probability "
               f"{imp['importance']['max_over_min']:.2f}. Distinct samples read per epoch: "
               f"importance {imp['distinct_per_epoch']}, shuffle "
               f"{res['shuffle']['distinct_per_epoch']} of {rep['n_samples']}.", ""]
    return md


def write_report(out: Path, rep: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = (*POLICIES, "belady")
    for key, res in rep["runs"].items():
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for ax, title, get in (
                (axes[0], "importance sampler (SHADE-driven)",
                 lambda s, k: res["importance"][str(s)]["policies"][k]),
                (axes[1], "shuffle sampler", lambda s, k: res["shuffle"][str(s)][k])):
            for k in names:
                ax.plot(rep["sizes"], [get(s, k)["hit_ratio"] for s in rep["sizes"]],
                        marker="o", label=k, ls="--" if k == "belady" else "-")
            ax.set_xlabel("cache size (% of dataset)")
            ax.set_ylabel("hit ratio")
            ax.set_title(f"{title}, {key[1:]} worker(s)")
            ax.legend()
        s0 = rep["sizes"][0]
        for k in names:
            axes[2].plot(range(1, rep["epochs"] + 1),
                         res["importance"][str(s0)]["policies"][k]["io_s_per_epoch"], "o-",
                         label=k)
        axes[2].set_xlabel("epoch")
        axes[2].set_ylabel("modelled I/O time (s, slowest worker)")
        axes[2].set_title(f"I/O time per epoch, importance sampler, {s0}% cache")
        axes[2].legend()
        fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
        fig.savefig(out / f"hit_ratio_{key}.png", dpi=100)
        plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key, res in rep["runs"].items():
        for ax, m in zip(axes, ("auc", "logloss")):
            ax.plot(rep["sizes"], [res["importance"][str(s)]["train"][m] for s in rep["sizes"]],
                    "o-", label=f"importance, {key[1:]} worker(s)")
            ax.axhline(res["shuffle"]["train"][m], ls="--", color=ax.lines[-1].get_color(),
                       label=f"shuffle, {key[1:]} worker(s)")
    for ax, m in zip(axes, ("held-out AUC", "held-out log loss")):
        ax.set_xlabel("cache size (% of dataset)")
        ax.set_ylabel(m)
        ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
    fig.savefig(out / "accuracy.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    key0 = next(iter(rep["runs"]))
    w = 0.8 / len(names)
    for j, k in enumerate(names):
        ax.bar(np.arange(len(rep["sizes"])) + j * w,
               [rep["runs"][key0]["importance"][str(s)]["policies"][k]["bytes"] / 1e6
                for s in rep["sizes"]], w, label=k)
    ax.set_xticks(np.arange(len(rep["sizes"])) + 0.4, [f"{s}%" for s in rep["sizes"]])
    ax.set_ylabel("MB fetched from storage")
    ax.set_title(f"bytes fetched, importance sampler, {key0[1:]} worker(s)")
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
    fig.savefig(out / "bytes.png", dpi=100)
    plt.close(fig)
    md = ["# SHADE study: importance-aware sample caching on the click log", "",
          f"Data: {rep['source']}, {rep['n_samples']} training samples in "
          f"{rep['epochs']} epochs, {rep['n_eval']} held out; batch {rep['batch_size']}; "
          f"device {rep['device']}; seed {rep['seed']}; rep_factor {rep['rep_factor']}; "
          f"I/O model {rep['io']['latency_us']} us + bytes / {rep['io']['bandwidth_mb']} MB/s "
          f"per fetch. Wall time {rep['wall_s']} s.", "", *tables(rep),
          *(f"![hit ratio, {k[1:]} worker(s)](hit_ratio_{k}.png)" for k in rep["runs"]), "",
          "![accuracy](accuracy.png)", "",
          "![bytes](bytes.png)", ""]
    (out / "report.md").write_text("\n".join(md))


def ablation(args) -> dict:
    """Where importance sampling's accuracy goes: for ``--seeds`` sampler seeds, held-out AUC /
    log loss of shuffle, uniform draws with replacement (the importance sampler with its scores
    never updated) and importance draws, no cache, 1 worker. Writes ``ablation.json``."""
    from sw_model.clicklog import ClickData, ClickLogGenerator
    from sw_model.dlrm import DLRMConfig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mcfg = DLRMConfig()
    gen = ClickLogGenerator(mcfg.clicklog())
    train_data = gen.generate(args.samples // mcfg.batch_size, mcfg.batch_size)
    eval_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval")
                                  for b in range(args.eval_samples // mcfg.batch_size)])
    store_dir = write_store(train_data, out / "store-ablation", args.shard_size)
    n_batches = args.epochs * (train_data.n // mcfg.batch_size)
    rows = {}
    for label, sampler, learn in (("shuffle", "shuffle", True),
                                  ("uniform with replacement", "importance", False),
                                  ("importance (SHADE weights)", "importance", True)):
        for seed in range(args.seeds):
            dp = DataPath(SampleStore(store_dir), DataPathConfig(
                sampler=sampler, batch_size=mcfg.batch_size, seed=seed))
            from sw_model.dlrm import DLRM, evaluate, make_float_device, make_model_device
            from sw_model.dlrm import train
            dev = (make_model_device if args.device == "golden" else make_float_device)(mcfg)
            model = DLRM(mcfg)
            train(dev, model, dp, n_batches, mcfg, data_feedback=dp if learn else None)
            ev = evaluate(model, dev.float_tables(), eval_data)
            rows.setdefault(label, []).append(dict(seed=seed, auc=ev["auc"],
                                                   logloss=ev["logloss"]))
            log(f"  {label}, seed {seed}: AUC {ev['auc']:.4f} log loss {ev['logloss']:.4f}")
    rep = dict(device=args.device, samples=train_data.n, epochs=args.epochs, runs=rows)
    (out / "ablation.json").write_text(json.dumps(rep, indent=1))
    print("| sampler (no cache, 1 worker) | AUC mean ± sd | log loss mean |")
    print("|---|---|---|")
    for label, rs in rows.items():
        a = np.array([r["auc"] for r in rs])
        print(f"| {label} | {a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0:.4f} | "
              f"{np.mean([r['logloss'] for r in rs]):.4f} |")
    return rep


def add_arguments(ap: argparse.ArgumentParser):
    ap.add_argument("--data", type=Path, default=None,
                    help="npz click log (docs/dlrm.md): first 90%% trained, the rest held out "
                         "(default: the synthetic click log)")
    ap.add_argument("--samples", type=int, default=4096, help="synthetic training samples")
    ap.add_argument("--eval-samples", type=int, default=2048, help="synthetic held-out samples")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--sizes", type=lambda s: [float(x) if "." in x else int(x)
                                               for x in s.split(",")], default=[1, 5, 10, 20],
                    help="cache sizes, percent of the dataset (1,5,10,20)")
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4],
                    help="worker counts (1,4)")
    ap.add_argument("--device", choices=("golden", "float32"), default="golden",
                    help="embedding device: the fixed-point golden model or float32 (faster)")
    ap.add_argument("--rep-factor", type=float, default=1.0,
                    help="SHADE's replication of cached samples (1 = no oversampling)")
    ap.add_argument("--shard-size", type=int, default=256)
    ap.add_argument("--latency-us", type=float, default=500.0, help="per-fetch latency (500)")
    ap.add_argument("--bandwidth-mb", type=float, default=200.0, help="MB/s (200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("build/shade"))
    ap.add_argument("--ablation", action="store_true",
                    help="instead of the study: shuffle vs uniform-with-replacement vs "
                         "importance draws, --seeds sampler seeds, no cache")
    ap.add_argument("--seeds", type=int, default=3, help="sampler seeds of --ablation (3)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl shade", description=__doc__.splitlines()[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    if a.epochs < 2 or a.samples < 64 or not a.sizes or not a.workers:
        ap.error("--epochs >= 2, --samples >= 64, at least one size and one worker count")
    if any(not 0 < s <= 100 for s in a.sizes) or any(w < 1 or 32 % w for w in a.workers):
        ap.error(f"--sizes in (0, 100], --workers dividing the batch of 32: {a.sizes} {a.workers}")
    from sw_model.clicklog import ClickLogFormatError
    if a.ablation:
        ablation(a)
        return 0
    try:
        rep = run_study(a)
    except (ClickLogFormatError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(tables(rep)))
    print(f"report: {a.out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
