"""Media-fault campaign: ``trainingcxl faults --batches N --p P --seed S`` (docs/faults.md).

Training batches on the full device with seeded random media errors (SLVERR from the PMEM
model) in every phase: LOOKUP+LOG, UPDATE (and its synchronous logging), COMMIT, SNAPSHOT
copies and the recovery that aborts a failed batch. The bench (:mod:`trainingcxl.faults.tb`)
says what it checks; the oracle is the golden model and the bytes the bench generated.

``--blocks K`` runs K simulator launches (block k: seed ``seed + k``, ``--batches`` each), in
this process or on a Dask cluster (``--workers N`` / ``--scheduler ADDRESS``,
:mod:`trainingcxl.cluster`). The report (``build/faults/report.json`` or ``--out``) sums the
blocks' counts: faults injected (by phase and by operation and region), MEDIA completions,
aborted batches, recoveries and those that met a fault, SNAPSHOT copies that failed, batches
committed; and lists each block's failure with its seed. Exit status 1 when a block failed or
wrote no result, 2 on bad options. Reproduce a failure with ``--seed <block seed> --blocks 1``.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from trainingcxl import cluster

__all__ = ["FaultBlock", "run_block", "merge", "main"]


@dataclass(frozen=True)
class FaultBlock:
    index: int
    seed: int
    batches: int
    p: float
    p_recovery: float
    out: str
    build: object
    sabotage: str = ""


def _build():
    from cosim import build as cb
    from hw.config import DeviceConfig
    return cb.device_build(DeviceConfig())


def run_block(block: FaultBlock, *, progress=None) -> dict:
    """One simulator launch (a campaign task); returns its result dict."""
    from cosim import build as cb
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    from trainingcxl.faults.tb import FaultParams

    b = block.build if cb.is_built(block.build) else _build()
    out = cluster.fresh_task_dir(block.out)
    p = FaultParams(out=str(out / "result.json"), batches=block.batches, p=block.p,
                    p_recovery=block.p_recovery, seed=block.seed,
                    bench=BenchConfig(DeviceConfig()), sabotage=block.sabotage)
    r = cluster.run_sim_task(b, "trainingcxl.faults.tb", "media_fault_campaign", seed=block.seed,
                             params=p, out=out, what="fault campaign")
    if r.get("failure"):
        r["run_error"] = None       # the bench's own assertion of its failure, reported already
    return r


def merge(results: list[dict]) -> dict:
    """Counts summed over blocks (nested per-phase/region counts too); failures listed."""
    ok = [r for r in results if not r.get("missing")]
    rep = cluster.sum_counts(ok, histograms=("faults_by_phase", "faults_by_region"))
    rep["wall_s"] = round(sum(r.get("wall_s") or 0 for r in ok), 2)
    rep["failures"] = [r["failure"] for r in ok if r.get("failure")]
    rep["run_errors"] = [{"seed": r["seed"], "error": r["run_error"]} for r in results
                         if r.get("run_error")]
    rep["blocks"] = [{"seed": r["seed"], "faults": r.get("faults"),
                      "batches_committed": r.get("batches_committed"),
                      "wall_s": r.get("wall_s"), "failed": bool(r.get("failure")),
                      "missing": bool(r.get("missing"))} for r in results]
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl faults", description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=20, help="training batches per block")
    ap.add_argument("--p", type=float, default=0.03,
                    help="fault probability per media burst in the batch's regions")
    ap.add_argument("--p-recovery", type=float, default=0.75,
                    help="chance that an abort's recovery gets one single-shot media fault")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=1,
                    help="simulator launches (block k: seed + k, --batches each)")
    ap.add_argument("--out", type=Path, default=Path("build", "faults"),
                    help="report directory (default build/faults)")
    cluster.add_arguments(ap)
    args = ap.parse_args(argv)
    cluster.check_arguments(ap, args)
    if args.batches < 1 or args.blocks < 1:
        ap.error(f"need --batches >= 1 and --blocks >= 1, got {args.batches} and {args.blocks}")
    for name in ("p", "p_recovery"):
        v = getattr(args, name)
        if not 0.0 <= v <= 1.0:
            ap.error(f"--{name.replace('_', '-')} must be a probability in [0, 1], got {v}")
    return cluster.run_with_executor("faults", args, lambda ex: _faults(args, ex))


def _faults(args, ex) -> int:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"faults: seed={args.seed} batches={args.batches} blocks={args.blocks} p={args.p} "
          f"p_recovery={args.p_recovery}; {ex.description}", flush=True)
    t0 = time.monotonic()
    b = _build()                        # once, before any task: the workers find it cached
    build_s = round(time.monotonic() - t0, 1)
    blocks = [FaultBlock(index=i, seed=args.seed + i, batches=args.batches, p=args.p,
                         p_recovery=args.p_recovery, out=str(out / "blocks" / f"{i:03d}"),
                         build=b) for i in range(args.blocks)]
    results = ex.map(run_block, blocks, desc="faults", unit="block", progress=args.blocks > 1)
    rep = merge(results)
    rep.update(seed=args.seed, batches_per_block=args.batches, blocks_n=args.blocks, p=args.p,
               p_recovery=args.p_recovery, build_s=build_s,
               wall_total_s=round(time.monotonic() - t0, 1))
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    print(f"faults: {rep.get('faults', 0)} faults injected in {rep.get('descriptors', 0)} "
          f"descriptors and {rep.get('recoveries', 0)} recoveries; "
          f"{rep.get('media_completions', 0)} MEDIA completions, "
          f"{rep.get('snapshot_failures', 0)} SNAPSHOT copies and "
          f"{rep.get('recoveries_failed', 0)} recoveries reported MEDIA; "
          f"{rep.get('aborted_batches', 0)} batches aborted and restored, "
          f"{rep.get('batches_committed', 0)} committed; {rep['wall_s']} s")
    print("  by phase: " + ", ".join(f"{k} {v}" for k, v in
                                     sorted(rep.get("faults_by_phase", {}).items())))
    print("  by operation and region: " + ", ".join(
        f"{k} {v}" for k, v in sorted(rep.get("faults_by_region", {}).items())))
    for f in rep["failures"][:5]:
        print(f"  FAILED seed {f['seed']}: {f['detail'].splitlines()[0][:400]}")
    for e in rep["run_errors"][:3]:
        print(f"  seed {e['seed']}: run error: {e['error'].splitlines()[-1][:300]}")
    print(f"faults: report {out / 'report.json'}")
    missing = any(r.get("missing") for r in results)
    return 0 if not rep["failures"] and not rep["run_errors"] and not missing else 1
