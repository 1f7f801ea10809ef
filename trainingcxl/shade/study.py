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

from .datapath import CACHE_MODES, DataPath, DataPathConfig, simulate
from .policies import belady_hits, make_policy
from .shards import owner, owners, shard_capacity
from .store import IOModel, SampleStore, write_store

POLICIES = ("shade", "lru", "lfu", "random", "icache")
VARIANTS = ("auto", "aggressive", "icache-sub")


def _train(mcfg, device_kind, make_dp, n_batches, eval_data, val_data=None):
    """Train one DLRM through the data path ``make_dp(validator)`` (a context manager);
    ``validator`` returns the held-out AUC on ``val_data`` of the model as it is (for
    ``auto`` sampling). Returns the training summary and the data path's views."""
    from sw_model.dlrm import DLRM, evaluate, make_float_device, make_model_device, train
    dev = (make_model_device if device_kind == "golden" else make_float_device)(mcfg)
    model = DLRM(mcfg)
    validator = None
    if val_data is not None:
        def validator():
            return evaluate(model, dev.float_tables(), val_data)["auc"]
    t0 = time.monotonic()
    with make_dp(validator) as dp:
        res = train(dev, model, dp, n_batches, mcfg, data_feedback=dp)
        views = _views(dp)
    ev = evaluate(model, dev.float_tables(), eval_data)
    return dict(auc=ev["auc"], logloss=ev["logloss"], train_s=round(time.monotonic() - t0, 1),
                final_loss=float(np.nanmean(res.losses()[-50:]))), views


class _Single:
    """One DataPath as a context manager (the distributed one already is)."""

    def __init__(self, dp):
        self.dp = dp

    def __enter__(self):
        return self.dp

    def __exit__(self, *exc):
        pass


def _views(dp):
    """Per worker: what it asked for (``trace``, ``batch`` of each read, ``observations``)
    and what its cache or shard saw (``view``), and its stats."""
    if isinstance(dp, DataPath):
        st = [dict(dp.stats(False), log=dp.log, trace=dp.trace, observations=dp.observations,
                   view=dict(trace=dp.view.trace, requester=dp.view.requester,
                             batch=dp.view.batch, observations=dp.view.observations,
                             capacity=dp.view.capacity))]
    else:
        st = dp.stats()
    out = []
    for s in st:
        batch = [r.batch for r in s["log"] for _ in r.asked]
        out.append(dict(trace=s["trace"], batch=batch, observations=s["observations"],
                        view=s["view"], stats={k: v for k, v in s.items()
                                               if k not in ("log", "trace", "observations",
                                                            "view")}))
    return out


def local_views(workers, size_pct, n):
    """Cache views of local caches: worker r's reads into its own cache of size/W."""
    world = len(workers)
    cap = int(round(size_pct / 100 * n / world))
    return [dict(trace=w["trace"], requester=[r] * len(w["trace"]), batch=w["batch"],
                 observations=w["observations"], capacity=cap)
            for r, w in enumerate(workers)]


def shard_views(workers, size_pct, n):
    """Cache views of the shared cache rebuilt from the workers' reads: batch by batch,
    worker 0's reads then worker 1's ... each to its owner's shard (the order the shards
    apply them, :mod:`.distributed`), then batch b's scores (every worker has every slice:
    worker 0's observations), each shard learning the samples it owns."""
    world = len(workers)
    total = int(round(size_pct / 100 * n))
    views = [dict(trace=[], requester=[], batch=[], observations=[],
                  capacity=shard_capacity(total, r, world)) for r in range(world)]
    by_batch = []
    for w in workers:
        d: dict = {}
        for i, b in zip(w["trace"], w["batch"]):
            d.setdefault(b, []).append(i)
        by_batch.append(d)
    w0 = workers[0]
    obs_after: dict = {}
    for pos, ids, sc in w0["observations"]:
        obs_after.setdefault(w0["batch"][pos - 1], []).append((ids, sc))
    for b in sorted(by_batch[0]):
        for r in range(world):
            for i in by_batch[r].get(b, []):
                v = views[owner(i, world)]
                v["trace"].append(i)
                v["requester"].append(r)
                v["batch"].append(b)
        for ids, sc in obs_after.get(b, []):
            ids = np.asarray(ids)
            own = owners(ids, world)
            for q, v in enumerate(views):
                m = own == q
                if m.any():
                    v["observations"].append((len(v["trace"]), ids[m], np.asarray(sc)[m]))
    return views


def _policy_results(store, views, world, bpe, seed, names=None):
    """Hit ratio, bytes and modelled I/O time per epoch of every policy (and Belady) on the
    cache views (local caches or shards): each cache replays what it saw; a miss is fetched
    by the worker that asked (I/O per epoch: the slowest worker's)."""
    n = store.n
    sizes = np.array([store.sample_bytes(i) for i in range(n)])
    out = {}
    for name in names or (*POLICIES, "belady"):
        hits_all, bytes_all, accesses = 0, 0, 0
        n_epochs = 1 + max(((max(v["batch"]) - 1) // bpe for v in views if v["batch"]),
                           default=0)
        per = np.zeros((world, n_epochs))
        for q, v in enumerate(views):
            tr = np.asarray(v["trace"], dtype=np.int64)
            if name == "belady":
                h = belady_hits(tr, v["capacity"])
            else:
                h = simulate(make_policy(name, v["capacity"], seed=seed * 1000 + q), tr,
                             v["observations"])
            miss = np.flatnonzero(~h)
            b = sizes[tr[miss]]
            t = store.io.latency_s + b / store.io.bandwidth
            ep = (np.asarray(v["batch"], dtype=np.int64)[miss] - 1) // bpe
            np.add.at(per, (np.asarray(v["requester"], dtype=np.int64)[miss], ep), t)
            hits_all += int(h.sum())
            bytes_all += int(b.sum())
            accesses += len(tr)
        out[name] = dict(hit_ratio=hits_all / accesses if accesses else 0.0, hits=hits_all,
                         accesses=accesses, bytes=bytes_all,
                         io_s_per_epoch=[float(x) for x in per.max(axis=0)])
    return out


def _run(store, store_dir, mcfg, args, eval_data, world, sampler, size, *, mode="shared",
         sampling="relaxed", cache="shade", substitute=False, val_data=None):
    from .distributed import DistributedDataPath
    cfg = DataPathConfig(sampler=sampler,
                         cache=cache if sampler == "importance" and size else "none",
                         cache_size=size, batch_size=mcfg.batch_size, seed=args.seed,
                         rep_factor=args.rep_factor, world=world, cache_mode=mode,
                         sampling=sampling, substitute=substitute)
    bpe = (store.n // world) // (mcfg.batch_size // world)
    n_batches = args.epochs * bpe

    def make_dp(validator):
        if world == 1:
            return _Single(DataPath(SampleStore(store_dir, store.io), cfg,
                                    validator=validator))
        return DistributedDataPath(store_dir, cfg, world, store.io, validator=validator)
    tr, workers = _train(mcfg, args.device, make_dp, n_batches, eval_data,
                         val_data if sampling == "auto" else None)
    per_epoch = bpe * (mcfg.batch_size // world)
    st0 = workers[0]["stats"]
    distinct = [len(set().union(*(w["trace"][e * per_epoch:(e + 1) * per_epoch]
                                  for w in workers))) for e in range(args.epochs)]
    served = sum(w["stats"]["served"]["hits"] for w in workers)
    reads = sum(len(w["trace"]) for w in workers)
    live = dict(served_ratio=served / reads if reads else 0.0,
                io=[w["stats"]["io"] for w in workers],
                caches=[w["stats"]["caches"] for w in workers],
                messages=sum(w["stats"].get("messages", 0) for w in workers))
    return dict(train=tr, workers=workers, bpe=bpe, importance=st0["importance"],
                distinct_per_epoch=distinct, live=live,
                epoch_modes=st0["epoch_modes"], validations=st0["validations"])


def _replay(store, r, size, mode, args):
    n = store.n
    world = len(r["workers"])
    views = (shard_views if mode == "shared" else local_views)(r["workers"], size, n)
    return _policy_results(store, views, world, r["bpe"], args.seed)


def _summary(r, pr=None, **extra):
    out = dict(train=r["train"], importance=r["importance"],
               distinct_per_epoch=r["distinct_per_epoch"], live=r["live"],
               epoch_modes=r["epoch_modes"], validations=r["validations"], **extra)
    if pr is not None:
        out["policies"] = pr
    return out


def run_study(args) -> dict:
    from sw_model.clicklog import ClickData, ClickLogGenerator, load_npz
    from sw_model.dlrm import DLRMConfig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    d = DLRMConfig()
    if args.data is not None:
        full = load_npz(args.data)
        n_train = int(full.n * 0.9)
        n_val = min(args.val_samples, (full.n - n_train) // 2)
        train_data = full.slice(0, n_train)
        val_data = full.slice(n_train, n_train + n_val)
        eval_data = full.slice(n_train + n_val, full.n)
        rows = tuple(int(r) for r in full.table_rows)
        lens = [int(np.diff(o).max(initial=0)) for o in full.offsets]
        mcfg = DLRMConfig(table_rows=rows, alphas=(d.alphas * len(rows))[:len(rows)],
                          pooling=(0, max(1, *lens)), lag_k=d.lag_k)
        source = str(args.data)
    else:
        mcfg = d
        gen = ClickLogGenerator(mcfg.clicklog())
        train_data = gen.generate(args.samples // mcfg.batch_size, mcfg.batch_size)
        n_eval = args.eval_samples // mcfg.batch_size
        eval_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval")
                                      for b in range(n_eval)])
        # validation: further batches of the eval split, disjoint from the held-out set
        val_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval") for b in
                                     range(n_eval, n_eval + args.val_samples // mcfg.batch_size)])
        source = f"synthetic click log (seed {mcfg.data_seed})"
    store_dir = out / "store"
    shutil.rmtree(store_dir, ignore_errors=True)
    write_store(train_data, store_dir, args.shard_size)
    store = SampleStore(store_dir, IOModel(args.latency_us * 1e-6, args.bandwidth_mb * 1e6))
    store.verify()
    n = store.n
    rep = dict(source=source, n_samples=n, n_eval=eval_data.n, n_val=val_data.n,
               epochs=args.epochs, sizes=list(args.sizes), workers=list(args.workers),
               cache_modes=list(args.cache_modes), variants=list(args.variants),
               variant_sizes=list(args.variant_sizes), device=args.device,
               seed=args.seed, rep_factor=args.rep_factor,
               io=dict(latency_us=args.latency_us, bandwidth_mb=args.bandwidth_mb),
               batch_size=mcfg.batch_size, runs={})
    log(f"seed {args.seed}, {n} samples, {args.epochs} epochs, sizes {args.sizes}, workers "
        f"{args.workers}, cache modes {args.cache_modes}, variants {args.variants}")
    t_all = time.monotonic()
    for world in args.workers:
        key = f"W{world}"
        modes = list(args.cache_modes) if world > 1 else ["shared"]
        res = rep["runs"][key] = dict(modes=modes, shuffle={m: {} for m in modes},
                                      importance={m: {} for m in modes}, variants={})
        log(f"W={world}: shuffle sampler")
        r = _run(store, store_dir, mcfg, args, eval_data, world, "shuffle", 0)
        res["shuffle_run"] = _summary(r)
        for m in modes:
            for size in args.sizes:
                res["shuffle"][m][str(size)] = _replay(store, r, size, m, args)
        log(f"  AUC {r['train']['auc']:.4f} ({r['train']['train_s']} s); LRU "
            + "; ".join(f"{m}: " + ", ".join(
                f"{s}% {res['shuffle'][m][str(s)]['lru']['hit_ratio']:.4f}" for s in args.sizes)
                for m in modes))
        r = _run(store, store_dir, mcfg, args, eval_data, world, "importance", 0)
        res["importance_nocache"] = _summary(r)
        log(f"  importance, no cache: AUC {r['train']['auc']:.4f} ({r['train']['train_s']} s)")
        for m in modes:
            for size in args.sizes:
                r = _run(store, store_dir, mcfg, args, eval_data, world, "importance", size,
                         mode=m)
                pr = _replay(store, r, size, m, args)
                res["importance"][m][str(size)] = _summary(r, pr)
                log(f"  importance + SHADE, {m} cache {size}%: AUC {r['train']['auc']:.4f} "
                    f"({r['train']['train_s']} s); hit ratio SHADE "
                    f"{pr['shade']['hit_ratio']:.4f} (live {r['live']['served_ratio']:.4f}) "
                    f"LRU {pr['lru']['hit_ratio']:.4f} Belady {pr['belady']['hit_ratio']:.4f}")
        for var in args.variants:
            if var in ("auto", "aggressive") and world == 1:
                continue          # one worker: aggressive only reorders the epoch's draws
            res["variants"][var] = {}
            for size in args.variant_sizes:
                kw = (dict(cache="icache", substitute=True) if var == "icache-sub"
                      else dict(sampling=var))
                r = _run(store, store_dir, mcfg, args, eval_data, world, "importance", size,
                         val_data=val_data, **kw)
                pr = _replay(store, r, size, "shared", args)
                res["variants"][var][str(size)] = _summary(r, pr)
                log(f"  {var} {size}%: AUC {r['train']['auc']:.4f} ({r['train']['train_s']} s)"
                    f"; served from cache {r['live']['served_ratio']:.4f}; SHADE "
                    f"{pr['shade']['hit_ratio']:.4f} LRU {pr['lru']['hit_ratio']:.4f} Belady "
                    f"{pr['belady']['hit_ratio']:.4f}; modes {r['epoch_modes']} validation "
                    f"{r['validations']}")
    rep["wall_s"] = round(time.monotonic() - t_all, 1)
    (out / "study.json").write_text(json.dumps(rep, indent=1, default=_json_default))
    write_report(out, rep)
    return rep


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def log(msg):
    print(msg, flush=True)


def _ratio(a, b):
    return a / b if b else float("inf")


def _row(p):
    return " | ".join(f"{p[k]['hit_ratio']:.4f}" for k in (*POLICIES, "belady"))


def tables(rep) -> list[str]:
    md = []
    for key, res in rep["runs"].items():
        world = int(key[1:])
        sh = res["shuffle_run"]["train"]
        md += [f"### {world} worker{'s' if world > 1 else ''}", ""]
        for m in res["modes"]:
            what = ("one cache" if world == 1 else
                    "one shared cache sharded over the workers" if m == "shared" else
                    "a local cache of size / W per worker")
            md += [f"Importance sampler driven by a SHADE cache, {what} (one run per size; "
                   "every policy replayed on that run's sequence):", "",
                   "| cache | SHADE | LRU | LFU | random | iCache-like | Belady | SHADE/LRU | "
                   "SHADE / LRU on shuffle | AUC | log loss | ΔAUC vs shuffle |",
                   "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for size in rep["sizes"]:
                r = res["importance"][m][str(size)]
                p = r["policies"]
                lru_shuffle = res["shuffle"][m][str(size)]["lru"]["hit_ratio"]
                md.append(f"| {size}% | {_row(p)} | "
                          f"{_ratio(p['shade']['hit_ratio'], p['lru']['hit_ratio']):.2f}× | "
                          f"{_ratio(p['shade']['hit_ratio'], lru_shuffle):.1f}× | "
                          f"{r['train']['auc']:.4f} | {r['train']['logloss']:.4f} | "
                          f"{r['train']['auc'] - sh['auc']:+.4f} |")
            md += ["", f"Shuffle sampler ({what}; one run, AUC {sh['auc']:.4f}, log loss "
                   f"{sh['logloss']:.4f}; every policy replayed on its sequence):", "",
                   "| cache | SHADE | LRU | LFU | random | iCache-like | Belady | SHADE/LRU |",
                   "|---|---|---|---|---|---|---|---|"]
            for size in rep["sizes"]:
                p = res["shuffle"][m][str(size)]
                md.append(f"| {size}% | {_row(p)} | "
                          f"{_ratio(p['shade']['hit_ratio'], p['lru']['hit_ratio']):.2f}× |")
            md.append("")
        nc = res["importance_nocache"]["train"]
        md += ["SHADE/LRU: both on the same sequence (the importance run). SHADE / LRU on "
               "shuffle: the SHADE cache of the importance run over LRU in the shuffle run "
               "(different runs: each policy with its own sampler, the paper's comparison). "
               f"Importance sampler without a cache (weighted draws only, no hit-first order): "
               f"AUC {nc['auc']:.4f}, log loss {nc['logloss']:.4f} "
               f"(ΔAUC vs shuffle {nc['auc'] - sh['auc']:+.4f}).", ""]
        if len(res["modes"]) > 1:
            md += ["Shared against local caches (importance + SHADE runs; live: the driving "
                   "cache's hits as the workers saw them; messages: shard requests and "
                   "answers between worker processes):", "",
                   "| cache | " + " | ".join(f"SHADE {m} (live)" for m in res["modes"])
                   + " | " + " | ".join(f"LRU {m}" for m in res["modes"]) + " | "
                   + " | ".join(f"Belady {m}" for m in res["modes"]) + " | "
                   + " | ".join(f"AUC {m}" for m in res["modes"]) + " | messages (shared) |",
                   "|---|" + "---|" * (4 * len(res["modes"]) + 1)]
            for size in rep["sizes"]:
                rr = {m: res["importance"][m][str(size)] for m in res["modes"]}
                md.append(f"| {size}% | " + " | ".join(
                    f"{rr[m]['policies']['shade']['hit_ratio']:.4f} "
                    f"({rr[m]['live']['served_ratio']:.4f})" for m in res["modes"]) + " | "
                    + " | ".join(f"{rr[m]['policies']['lru']['hit_ratio']:.4f}"
                                 for m in res["modes"]) + " | "
                    + " | ".join(f"{rr[m]['policies']['belady']['hit_ratio']:.4f}"
                                 for m in res["modes"]) + " | "
                    + " | ".join(f"{rr[m]['train']['auc']:.4f}" for m in res["modes"])
                    + f" | {rr.get('shared', {}).get('live', {}).get('messages', 0):,} |")
            md.append("")
        if res["variants"]:
            md += ["Variants (shared cache; one run each; every policy replayed on its "
                   "sequence; served: hits plus iCache's substitutes, as the workers saw "
                   "them):", "",
                   "| variant | cache | served | SHADE | LRU | Belady | SHADE/LRU | AUC | "
                   "log loss | ΔAUC vs shuffle | sampling per epoch | validation AUC |",
                   "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for var, bysize in res["variants"].items():
                for size, r in bysize.items():
                    p = r["policies"]
                    modes = ", ".join(r["epoch_modes"].values()) or "-"
                    vals = ", ".join(f"{v:.4f}" for v in r["validations"].values()) or "-"
                    md.append(f"| {var} | {size}% | {r['live']['served_ratio']:.4f} | "
                              f"{p['shade']['hit_ratio']:.4f} | {p['lru']['hit_ratio']:.4f} | "
                              f"{p['belady']['hit_ratio']:.4f} | "
                              f"{_ratio(p['shade']['hit_ratio'], p['lru']['hit_ratio']):.2f}× | "
                              f"{r['train']['auc']:.4f} | {r['train']['logloss']:.4f} | "
                              f"{r['train']['auc'] - sh['auc']:+.4f} | {modes} | {vals} |")
            md.append("")
        m0 = res["modes"][0]
        md += [f"Bytes fetched from storage (MB, whole run) and modelled I/O time per epoch "
               f"(s, mean over epochs, slowest worker; {m0} cache):", "",
               "| sampler, cache | " + " | ".join(f"{k}" for k in (*POLICIES, "belady")) + " |",
               "|---|" + "---|" * (len(POLICIES) + 1)]
        for size in rep["sizes"]:
            for name, p in (("importance", res["importance"][m0][str(size)]["policies"]),
                            ("shuffle", res["shuffle"][m0][str(size)])):
                md.append(f"| {name}, {size}% | " + " | ".join(
                    f"{p[k]['bytes'] / 1e6:.2f} MB, {np.mean(p[k]['io_s_per_epoch']):.2f} s"
                    for k in (*POLICIES, "belady")) + " |")
        imp = res["importance"][m0][str(rep["sizes"][0])]
        md += ["", f"Importance at the end (smallest-cache run): the top 1/5/10/20 % of samples "
               f"by weight hold {imp['importance']['top1']:.3f} / "
               f"{imp['importance']['top5']:.3f} / {imp['importance']['top10']:.3f} / "
               f"{imp['importance']['top20']:.3f} of the sampling probability (uniform: 0.01 / "
               f"0.05 / 0.10 / 0.20); largest/smallest probability "
               f"{imp['importance']['max_over_min']:.2f}. Distinct samples read per epoch: "
               f"importance {imp['distinct_per_epoch']}, shuffle "
               f"{res['shuffle_run']['distinct_per_epoch']} of {rep['n_samples']}.", ""]
    return md


def write_report(out: Path, rep: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = (*POLICIES, "belady")
    for key, res in rep["runs"].items():
        for m in res["modes"]:
            fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
            for ax, title, get in (
                    (axes[0], "importance sampler (SHADE-driven)",
                     lambda s, k: res["importance"][m][str(s)]["policies"][k]),
                    (axes[1], "shuffle sampler", lambda s, k: res["shuffle"][m][str(s)][k])):
                for k in names:
                    ax.plot(rep["sizes"], [get(s, k)["hit_ratio"] for s in rep["sizes"]],
                            marker="o", label=k, ls="--" if k == "belady" else "-")
                ax.set_xlabel("cache size (% of dataset)")
                ax.set_ylabel("hit ratio")
                ax.set_title(f"{title}, {key[1:]} worker(s), {m} cache", fontsize=10)
                ax.legend()
            s0 = rep["sizes"][0]
            for k in names:
                axes[2].plot(range(1, rep["epochs"] + 1),
                             res["importance"][m][str(s0)]["policies"][k]["io_s_per_epoch"],
                             "o-", label=k)
            axes[2].set_xlabel("epoch")
            axes[2].set_ylabel("modelled I/O time (s, slowest worker)")
            axes[2].set_title(f"I/O time per epoch, importance sampler, {s0}% cache",
                              fontsize=10)
            axes[2].legend()
            fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
            suffix = "" if m == "shared" else f"_{m}"
            fig.savefig(out / f"hit_ratio_{key}{suffix}.png", dpi=100)
            plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key, res in rep["runs"].items():
        for m in res["modes"]:
            for ax, met in zip(axes, ("auc", "logloss")):
                ax.plot(rep["sizes"], [res["importance"][m][str(s)]["train"][met]
                                       for s in rep["sizes"]],
                        "o-", label=f"importance, {key[1:]} worker(s), {m}")
        for ax, met in zip(axes, ("auc", "logloss")):
            ax.axhline(res["shuffle_run"]["train"][met], ls="--",
                       color=ax.lines[-1].get_color(), label=f"shuffle, {key[1:]} worker(s)")
    for ax, met in zip(axes, ("held-out AUC", "held-out log loss")):
        ax.set_xlabel("cache size (% of dataset)")
        ax.set_ylabel(met)
        ax.legend(fontsize=7)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
    fig.savefig(out / "accuracy.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    key0 = next(iter(rep["runs"]))
    m0 = rep["runs"][key0]["modes"][0]
    w = 0.8 / len(names)
    for j, k in enumerate(names):
        ax.bar(np.arange(len(rep["sizes"])) + j * w,
               [rep["runs"][key0]["importance"][m0][str(s)]["policies"][k]["bytes"] / 1e6
                for s in rep["sizes"]], w, label=k)
    ax.set_xticks(np.arange(len(rep["sizes"])) + 0.4, [f"{s}%" for s in rep["sizes"]])
    ax.set_ylabel("MB fetched from storage")
    ax.set_title(f"bytes fetched, importance sampler, {key0[1:]} worker(s)")
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
    fig.savefig(out / "bytes.png", dpi=100)
    plt.close(fig)
    plots = []
    for k, res in rep["runs"].items():
        for m in res["modes"]:
            suffix = "" if m == "shared" else f"_{m}"
            plots.append(f"![hit ratio, {k[1:]} worker(s), {m} cache]"
                         f"(hit_ratio_{k}{suffix}.png)")
    md = ["# SHADE study: importance-aware sample caching on the click log", "",
          f"Data: {rep['source']}, {rep['n_samples']} training samples in "
          f"{rep['epochs']} epochs, {rep['n_eval']} held out, {rep['n_val']} for validation "
          f"(auto sampling); batch {rep['batch_size']}; "
          f"device {rep['device']}; seed {rep['seed']}; rep_factor {rep['rep_factor']}; "
          f"I/O model {rep['io']['latency_us']} us + bytes / {rep['io']['bandwidth_mb']} MB/s "
          f"per fetch. Wall time {rep['wall_s']} s.", "", *tables(rep), *plots, "",
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
    ap.add_argument("--cache-modes", type=lambda s: s.split(","), default=["shared", "local"],
                    help="with several workers: shared (one cache sharded over the workers' "
                         "processes, SHADE as published) and/or local (each worker its own "
                         "cache of size / W); default shared,local")
    ap.add_argument("--variants", type=lambda s: [x for x in s.split(",") if x],
                    default=["auto", "aggressive", "icache-sub"],
                    help="further runs at --variant-sizes: auto (SHADE's aggressive/relaxed "
                         "rule from validation AUC), aggressive (always), icache-sub (iCache-like "
                         "cache with substitution); auto and aggressive with several workers "
                         "only; '' for none")
    ap.add_argument("--variant-sizes", type=lambda s: [float(x) if "." in x else int(x)
                                                       for x in s.split(",")], default=[1, 10],
                    help="cache sizes of the variants (1,10)")
    ap.add_argument("--val-samples", type=int, default=1024,
                    help="validation samples for auto sampling (1024; synthetic: further eval-"
                         "split batches; npz: the start of the held-out 10%%, at most half)")
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
    if not a.cache_modes or any(m not in CACHE_MODES for m in a.cache_modes):
        ap.error(f"--cache-modes: one or more of {CACHE_MODES}, not {a.cache_modes}")
    if any(v not in VARIANTS for v in a.variants):
        ap.error(f"--variants: some of {VARIANTS}, not {a.variants}")
    if any(not 0 < s <= 100 for s in a.variant_sizes) or a.val_samples < 32:
        ap.error("--variant-sizes in (0, 100], --val-samples >= 32")
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
