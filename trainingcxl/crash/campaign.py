"""Crash campaign runner: ``trainingcxl crash --points N --seed S`` (docs/crash.md).

Builds the device top once (Verilator, cached), runs ``trainingcxl.crash.tb`` in one simulator
launch that tries every crash point, follows its JSON-lines results file for a progress bar
(tqdm, on stderr), and writes ``build/crash/report.json`` (under the working directory, or ``--out``): points tried / recovered /
bit-identical, every failure with its seed, cycle and error, and the measured figures. If the
simulator dies mid-campaign (an RTL assertion, a crash of the simulator), the point it was on is
recorded as failed and a new launch resumes after it. Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from cosim import build as cb

__all__ = ["main", "run_campaign", "summarize"]

DEFAULT_OUT = Path("build", "crash")
# PMEM latencies (cycles): short reads keep a run short (the campaign replays most of a run per
# point), longer writes keep more writes in flight at a random instant
DEFAULT_LATENCY = 8
DEFAULT_WRITE_LATENCY = 16


def _expected_points(spec: str) -> int | None:
    if spec.startswith("random:"):
        return int(spec.split(":", 1)[1])
    if spec.startswith("range:"):
        _, a, b = spec.split(":")
        return max(0, int(b) - int(a))
    return len([x for x in spec.split(",") if x.strip()])


def _read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass            # a line being written
    return out


def summarize(records: list[dict], *, requested: int | None = None) -> dict:
    """Report dict from the results lines (the last record of each point wins)."""
    points = {}
    for r in records:
        if r.get("event") == "point":
            points[r["i"]] = r
    refs = [r for r in records if r.get("event") == "reference"]
    pts = [points[i] for i in sorted(points)]
    failures = [{k: p.get(k) for k in ("i", "cycle", "seed", "point_seed", "committed", "error",
                                       "traceback")} for p in pts if not p["ok"]]
    committed = {}
    for p in pts:
        if p.get("committed") is not None:
            committed[str(p["committed"])] = committed.get(str(p["committed"]), 0) + 1
    walls = [p["wall_s"] for p in pts if "wall_s" in p]
    rep = {
        "requested": requested,
        "tried": len(pts),
        "recovered": sum(bool(p.get("recovered")) for p in pts),
        "identical": sum(bool(p.get("identical")) for p in pts),
        "failed": len(failures),
        "reference_cycles": refs[0]["cycles"] if refs else None,
        "batches": refs[0].get("batches") if refs else None,
        "committed_histogram": dict(sorted(committed.items(), key=lambda kv: int(kv[0]))),
        "words_survived": sum(p.get("words_survived", 0) for p in pts),
        "words_lost": sum(p.get("words_lost", 0) for p in pts),
        "points_with_inflight_writes": sum(1 for p in pts if p.get("writes_in_flight")),
        "recovered_records_total": sum(p.get("recovered_records") or 0 for p in pts),
        "point_wall_s_mean": round(sum(walls) / len(walls), 3) if walls else None,
        "failures": failures,
    }
    return rep


def run_campaign(*, points: str, seed: int, cfg=None, latency: int = DEFAULT_LATENCY,
                 write_latency: int = DEFAULT_WRITE_LATENCY, out: Path = DEFAULT_OUT,
                 workload: dict | None = None, via_host: bool = True, max_restarts: int = 5,
                 progress: bool = True, build=None, chunk: int = 25, mutate: str = "",
                 profile: Path | None = None) -> dict:
    """Run a campaign; returns the report (also written to ``out/report.json``)."""
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    from trainingcxl.crash.tb import CrashParams

    cfg = cfg or DeviceConfig()
    out = Path(out).resolve()     # the runner may change directory
    out.mkdir(parents=True, exist_ok=True)
    results = out / "points.jsonl"
    results.write_text("")
    t0 = time.monotonic()
    if build is None:
        build = cb.device_build(cfg)
    t_build = time.monotonic() - t0
    expected = _expected_points(points)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=expected, desc=f"crash seed {seed}", unit="pt", file=sys.stderr,
                   dynamic_ncols=True)
    skip, restarts, sim_errors = 0, 0, []
    while True:
        run_params = CrashParams(
            bench=BenchConfig(cfg, latency=latency, write_latency=write_latency),
            seed=seed, points=points, skip=skip, chunk=chunk, workload=dict(workload or {}),
            results=str(results.resolve()), via_host=via_host, mutate=mutate,
            profile=str(Path(profile).resolve()) if profile else None)
        box = {}

        def target():
            try:
                box["res"] = cb.run(build, "trainingcxl.crash.tb", seed=seed, params=run_params,
                                    test_dir=out / f"run{restarts}")
            except cb.CosimError as e:
                box["err"] = e

        th = threading.Thread(target=target, daemon=True)
        th.start()
        while th.is_alive():
            th.join(1.0)
            if bar is not None:
                done = len({r["i"] for r in _read_lines(results) if r.get("event") == "point"})
                if done != bar.n:
                    bar.n = done
                    bar.refresh()
        recs = _read_lines(results)
        done = {r["i"] for r in recs if r.get("event") == "point"}
        started = [r for r in recs if r.get("event") == "start" and r["i"] not in done]
        if "err" in box and started:
            # the simulator died during a point: record it and resume after it
            s = started[-1]
            sim_errors.append(str(box["err"])[-3000:])
            with open(results, "a") as f:
                f.write(json.dumps({"event": "point", "i": s["i"], "cycle": s["cycle"],
                                    "seed": seed, "ok": False, "recovered": False,
                                    "identical": False,
                                    "error": f"simulator died: {str(box['err'])[-1500:]}"})
                        + "\n")
            skip = s["i"] + 1
            restarts += 1
            if restarts <= max_restarts and (expected is None or skip < expected):
                continue
        elif "err" in box and not any(r.get("event") == "reference" for r in recs):
            sim_errors.append(str(box["err"])[-3000:])
        break
    if bar is not None:
        bar.n = len({r["i"] for r in _read_lines(results) if r.get("event") == "point"})
        bar.close()
    rep = summarize(_read_lines(results), requested=expected)
    rep.update(seed=seed, points_spec=points, latency=latency, write_latency=write_latency,
               chunk=chunk, mutate=mutate, config=json.loads(cfg.to_json()),
               workload=workload or {}, via_host=via_host, sim_restarts=restarts,
               sim_errors=sim_errors, build_s=round(t_build, 1),
               wall_s=round(time.monotonic() - t0, 1), results=str(results))
    rep["ok"] = (rep["failed"] == 0 and not sim_errors and rep["tried"] == expected
                 and rep["identical"] == rep["tried"])
    (out / "report.json").write_text(json.dumps(rep, indent=2) + "\n")
    return rep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="trainingcxl crash", description=__doc__.split("\n")[0])
    p.add_argument("--points", type=int, default=1000, help="seeded random crash points")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--range", dest="cycle_range", default=None,
                   help="A:B: crash at every cycle in [A, B) instead of random points")
    p.add_argument("--cycles", default=None, help="comma-separated crash cycles")
    p.add_argument("--config", default="default", help="named DeviceConfig (hw.config.CONFIGS)")
    p.add_argument("--latency", type=int, default=DEFAULT_LATENCY,
                   help="PMEM read latency (cycles)")
    p.add_argument("--write-latency", type=int, default=DEFAULT_WRITE_LATENCY,
                   help="PMEM write latency (cycles)")
    p.add_argument("--chunk", type=int, default=25,
                   help="crash images taken per pass of the workload")
    p.add_argument("--workload", default="{}", help="JSON keyword arguments of make_workload")
    p.add_argument("--backdoor", action="store_true",
                   help="descriptors/completions backdoor instead of through the CXL.mem host")
    p.add_argument("--mutate", default="", choices=["", "wipe_log"],
                   help="self-check: wipe_log erases the undo log from every crash image, so "
                        "points that crash inside a batch must fail")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--profile", type=Path, default=None,
                   help="write cProfile statistics of the points loop here")
    a = p.parse_args(argv)
    from hw.config import CONFIGS, named
    if a.points < 1 or a.latency < 1 or a.write_latency < 1 or a.chunk < 1:
        p.error("--points, --latency, --write-latency and --chunk must be >= 1")
    if a.config not in CONFIGS:
        p.error(f"--config {a.config!r}: one of {sorted(CONFIGS)}")
    try:
        a.workload = json.loads(a.workload)
    except json.JSONDecodeError as e:
        p.error(f"--workload is not JSON: {e}")
    if not isinstance(a.workload, dict):
        p.error("--workload must be a JSON object of make_workload keyword arguments")
    if a.cycles:
        spec = a.cycles
    elif a.cycle_range:
        spec = "range:" + a.cycle_range
    else:
        spec = f"random:{a.points}"
    rep = run_campaign(points=spec, seed=a.seed, cfg=named(a.config), latency=a.latency,
                       write_latency=a.write_latency, chunk=a.chunk, mutate=a.mutate,
                       out=a.out, workload=a.workload, via_host=not a.backdoor,
                       progress=not a.no_progress, profile=a.profile)
    print(f"crash campaign seed {a.seed} ({spec}): {rep['tried']} points tried, "
          f"{rep['recovered']} recovered, {rep['identical']} bit-identical, "
          f"{rep['failed']} failed; reference run {rep['reference_cycles']} cycles, "
          f"{rep['wall_s']} s (build {rep['build_s']} s); report {a.out / 'report.json'}")
    for f in rep["failures"][:10]:
        print(f"  FAIL point {f['i']} cycle {f['cycle']} seed {f['seed']}: {f['error']}")
    for e in rep["sim_errors"][:3]:
        print(f"  simulator error: {e[-600:]}")
    return 0 if rep["ok"] else 1

