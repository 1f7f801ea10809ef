"""Fuzzing of the device's input surfaces: ``trainingcxl fuzz --surface {desc,csr,cxl} --count N
--seed S`` (docs/faults.md).

``desc``: mutated command descriptors (every field, reserved bytes, flags, kinds, random bytes)
and ring pointers (CMD_TAIL) on the full device; ``csr``: sequences of random AXI4-Lite reads and
writes (any offset, read-only and unmapped ones, partial strobes, doorbells and RECOVER at any
point of a sequence) on the full device; ``cxl``: raw CXL.mem Req/RwD headers (any opcode,
SnpType, MetaField, MetaValue; refused, unmapped and beyond-addr_bits lines) mixed into random
legal host traffic, and BIRsps without a BISnp, on the DCOH test top. The oracle is the golden
model (``sw_model.training``, ``sw_model.coherence``), never the RTL: the bench in
:mod:`trainingcxl.fuzz.tb` says what it checks.

``--blocks K`` splits the count into K simulator launches (block k: seed ``seed + k``), run in
this process or on a Dask cluster with ``--workers N`` / ``--scheduler ADDRESS``
(:mod:`trainingcxl.cluster`, docs/campaigns.md). The report (``build/fuzz/<surface>/report.json``
or ``--out``) sums the blocks' counts: inputs, bad inputs (the model reports an error), hangs
(the watchdog fired), unreported errors (the model reports an error, the RTL does not), wrong
errors (another code, value or bag), spurious errors, corruptions (memory image differs from the
model's), CSR mismatches, and lists each block's first failure with its seed. Exit status 1 when
any of those failure counts is not 0 or a block wrote no result; 2 on bad options.
Reproduce a failure with ``--seed <block seed> --count <block count> --blocks 1``.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from trainingcxl import cluster

__all__ = ["FuzzBlock", "run_block", "merge", "main", "FAILURE_KEYS", "WALL_CLOCK_FIELDS"]

SURFACES = ("desc", "csr", "cxl")
FAILURE_KEYS = ("hangs", "unreported_errors", "wrong_errors", "spurious_errors",
                "wrong_completions", "corruptions", "csr_mismatches", "unusable_after")
WALL_CLOCK_FIELDS = ("wall_s", "inputs_per_s", "wall_total_s", "build_s")
# inputs per round: descriptors per doorbell, CSR operations per sequence, cxl phase scale
DEFAULT_ROUND = {"desc": 8, "csr": 8, "cxl": 8}


@dataclass(frozen=True)
class FuzzBlock:
    index: int
    surface: str
    seed: int
    count: int
    round: int
    watchdog_us: int
    out: str
    build: object
    sabotage: str = ""
    profile: bool = False
    pmem: str = "python"


def _build(surface: str):
    from cosim import build as cb
    from hw.config import DeviceConfig
    if surface == "cxl":
        from trainingcxl.stress.job import _build as dcoh_build
        return dcoh_build("main")
    return cb.device_build(DeviceConfig())


def run_block(block: FuzzBlock, *, progress=None) -> dict:
    """One simulator launch (a campaign task); returns its result dict."""
    from cosim import build as cb
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    from trainingcxl.fuzz.tb import FuzzParams

    b = block.build if cb.is_built(block.build) else _build(block.surface)
    out = cluster.fresh_task_dir(block.out)
    p = FuzzParams(surface=block.surface, out=str(out / "result.json"), count=block.count, seed=block.seed,
                   round=block.round, watchdog_us=block.watchdog_us,
                   bench=BenchConfig(DeviceConfig(), pmem=block.pmem), sabotage=block.sabotage,
                   profile=block.profile)
    test = "fuzz_cxl" if block.surface == "cxl" else "fuzz_device"
    r = cluster.run_sim_task(b, "trainingcxl.fuzz.tb", test, seed=block.seed, params=p, out=out,
                             what="fuzz run")
    r.setdefault("count", block.count)
    return r


def merge(results: list[dict]) -> dict:
    """Counts summed over blocks; each block's seed, count, inputs and failure listed."""
    ok = [r for r in results if not r.get("missing")]
    rep = cluster.sum_counts(ok, skip=("seed", "count"),
                             histograms=("status_histogram", "error_codes", "expected_errors"))
    wall = sum(r.get("wall_s") or 0 for r in ok)
    rep["wall_s"] = round(wall, 2)
    rep["inputs_per_s"] = round(rep.get("inputs", 0) / wall, 2) if wall else None
    rep["failures"] = [{"seed": r["seed"], **r["failure"]} for r in ok if r.get("failure")]
    rep["run_errors"] = [{"seed": r["seed"], "error": r["run_error"]} for r in results
                         if r.get("run_error")]
    rep["blocks"] = [{"seed": r["seed"], "count": r.get("count"), "inputs": r.get("inputs"),
                      "wall_s": r.get("wall_s"),
                      "failure": (r.get("failure") or {}).get("kind"),
                      "missing": bool(r.get("missing"))} for r in results]
    return rep


def main(argv=None) -> int:
    from cosim.tb.config import PMEM_MODELS
    ap = argparse.ArgumentParser(prog="trainingcxl fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--surface", choices=SURFACES, required=True)
    ap.add_argument("--count", type=int, default=200,
                    help="inputs: descriptors (desc), CSR sequences (csr), raw CXL.mem messages "
                         "and stray BIRsps (cxl)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=1,
                    help="simulator launches the count is split into (block k: seed + k)")
    ap.add_argument("--round", type=int, default=None,
                    help="descriptors per doorbell / CSR operations per sequence / cxl phase "
                         "scale (default 8)")
    ap.add_argument("--watchdog-us", type=int, default=2000,
                    help="simulated microseconds allowed per round before it counts as a hang")
    ap.add_argument("--out", type=Path, default=None,
                    help="report directory (default build/fuzz/<surface>)")
    ap.add_argument("--pmem", choices=PMEM_MODELS, default="python",
                    help="desc/csr: PMEM model on the media port: python (cosim.pmem, with "
                         "media stalls; default) or cpp (compiled into the same simulator "
                         "build, no stalls, faster)")
    ap.add_argument("--profile", action="store_true",
                    help="desc/csr: cProfile statistics of each block's loop, profile.pstats "
                         "beside its result.json")
    cluster.add_arguments(ap)
    args = ap.parse_args(argv)
    cluster.check_arguments(ap, args)
    if args.count < 1 or not 1 <= args.blocks <= args.count:
        ap.error(f"need --count >= 1 and 1 <= --blocks <= --count, got --count {args.count} "
                 f"--blocks {args.blocks}")
    if args.surface == "cxl" and (args.pmem != "python" or args.profile):
        ap.error("--pmem and --profile apply to the device surfaces (desc, csr); the cxl "
                 "surface runs the DCOH test top")
    return cluster.run_with_executor("fuzz", args, lambda ex: _fuzz(args, ex))


def _fuzz(args, ex) -> int:
    out = (args.out or Path("build", "fuzz", args.surface)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rnd = args.round or DEFAULT_ROUND[args.surface]
    print(f"fuzz: surface={args.surface} seed={args.seed} count={args.count} "
          f"blocks={args.blocks} round={rnd} watchdog={args.watchdog_us} us; {ex.description}",
          flush=True)
    t0 = time.monotonic()
    b = _build(args.surface)  # once, before any task: the workers find it cached
    build_s = round(time.monotonic() - t0, 1)
    n, k = args.count, args.blocks
    blocks = [FuzzBlock(index=i, surface=args.surface, seed=args.seed + i,
                        count=n // k + (1 if i < n % k else 0), round=rnd,
                        watchdog_us=args.watchdog_us, out=str(out / "blocks" / f"{i:03d}"),
                        build=b, profile=args.profile, pmem=args.pmem) for i in range(k)]
    results = ex.map(run_block, blocks, desc="fuzz", unit="block", progress=k > 1)
    rep = merge(results)
    for key in ("inputs", "bad_inputs") + FAILURE_KEYS:
        rep.setdefault(key, 0)
    rep.update(surface=args.surface, seed=args.seed, count=args.count, blocks_n=k,
               round=rnd, watchdog_us=args.watchdog_us, pmem=args.pmem, build_s=build_s,
               wall_total_s=round(time.monotonic() - t0, 1))
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    fails = {key: rep[key] for key in FAILURE_KEYS if rep[key]}
    print(f"fuzz: {rep['inputs']} inputs ({rep['bad_inputs']} bad) in {rep['wall_s']} s = "
          f"{rep['inputs_per_s']} inputs/s; hangs {rep['hangs']}, unreported errors "
          f"{rep['unreported_errors']}, corruptions {rep['corruptions']}, other failures "
          f"{ {k: v for k, v in fails.items() if k not in ('hangs', 'unreported_errors', 'corruptions')} }")
    for f in rep["failures"][:5]:
        print(f"  seed {f['seed']} input {f['input']}: {f['kind']}: "
              f"{f['detail'].splitlines()[0][:300]}")
    for e in rep["run_errors"][:3]:
        print(f"  seed {e['seed']}: run error: {e['error'].splitlines()[-1][:300]}")
    print(f"fuzz: report {out / 'report.json'}")
    missing = any(r.get("missing") for r in results)
    return 0 if not fails and not rep["failures"] and not rep["run_errors"] and not missing \
        else 1
