"""The training job's side of the data path (``trainingcxl train --cache ... --sampler ...``):
writes the training samples as a sample store, describes the data path as JSON for the RTL
run's simulator process and builds it there and in the reference runs."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from sw_model.clicklog import ClickData
from .datapath import CACHES, DataPath, DataPathConfig, SidecarStore
from .sampler import SAMPLERS
from .store import IOModel, SampleStore, write_store


def add_arguments(ap):
    """The data-path options of ``trainingcxl train``."""
    ap.add_argument("--cache", choices=CACHES, default="none",
                    help="sample cache between the trainer and the sample store (docs/shade.md)")
    ap.add_argument("--substitute", action="store_true",
                    help="with --cache icache: iCache's substitution (a substitutable miss is "
                         "served by a cached unimportant sample; changes what is trained on)")
    ap.add_argument("--cache-size", type=float, default=10.0,
                    help="sample cache size, percent of the training samples (10)")
    ap.add_argument("--sampler", choices=SAMPLERS, default=None,
                    help="sample order: sequential, shuffle or importance (SHADE); with "
                         "--cache or --sampler the job reads a sample store for several epochs")
    ap.add_argument("--dataset-batches", type=int, default=64,
                    help="with a data path: training samples = this many synthetic batches "
                         "(64; an npz file's whole training part)")


def enabled(a) -> bool:
    return a.cache != "none" or a.sampler is not None


def prepare(a, mcfg, data, n_batches: int, seed: int) -> dict:
    """Write batches 1..``n_batches`` of ``data`` as a sample store under ``a.out/store``;
    return the JSON spec of the data path (store, config, checkpoint directory)."""
    if not 0 <= a.cache_size <= 100:
        raise ValueError(f"--cache-size is a percentage, not {a.cache_size!r}")
    if a.substitute and a.cache != "icache":
        raise ValueError(f"--substitute is iCache's substitution: it needs --cache icache, "
                         f"not {a.cache!r}")
    samples = ClickData.concat([data(b) for b in range(1, n_batches + 1)])
    store = write_store(samples, Path(a.out) / "store", shard_size=256).resolve()
    cfg = DataPathConfig(sampler=a.sampler or "shuffle", cache=a.cache,
                         cache_size=a.cache_size, batch_size=mcfg.batch_size, seed=seed,
                         substitute=a.substitute)
    SampleStore(store).verify()
    return dict(store=str(store), cfg=asdict(cfg))


def build(spec: dict, checkpoints=None) -> DataPath:
    """The DataPath a spec describes; ``checkpoints``: directory of its sidecar (host storage
    that survives a device power failure), None for memory."""
    cfg = DataPathConfig(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in spec["cfg"].items()})
    return DataPath(SampleStore(spec["store"], IOModel()), cfg,
                    sidecar=SidecarStore(checkpoints))


def summary(dp: DataPath) -> dict:
    """Hit ratio of the job's cache, storage counters and the sample order (last attempt of
    every batch) of a finished run."""
    st = dp.stats(belady=dp.driving is not None)
    order = {}
    for r in dp.log:
        if not r.replay:
            order[r.batch] = r.ids.tolist()
    return dict(sampler=dp.cfg.sampler, cache=dp.cfg.cache, cache_size=dp.cfg.cache_size,
                capacity=dp.capacity, n_samples=dp.store.n, stats=st,
                replayed=sum(r.replay for r in dp.log), order=order)


def describe(s: dict) -> str:
    st = s["stats"]
    c = st["caches"].get(s["cache"])
    hit = (f"hit ratio {c['hit_ratio']:.4f} (Belady {st['caches']['belady']['hit_ratio']:.4f})"
           if c else "no cache")
    if c and c.get("substituted"):
        hit += (f", {c['substituted']} misses served by a substitute (served from the cache "
                f"{st['served']['hit_ratio']:.4f})")
    return (f"sampler {s['sampler']}, cache {s['cache']} {s['cache_size']}% of "
            f"{s['n_samples']} samples ({s['capacity']}): {hit}, {st['io']['fetches']} fetches,"
            f" {st['io']['bytes']:,} B, modelled I/O {st['io']['seconds']:.2f} s, "
            f"{s['replayed']} batches re-read after failures")
