"""Crash campaign runner: ``trainingcxl crash --points N --seed S`` (docs/crash.md).

Builds the device top once (Verilator, cached), then runs the campaign's points as tasks
(:mod:`trainingcxl.cluster`): by default one task, in this process, i.e. one launch of
``trainingcxl.crash.tb`` that tries every crash point; with ``--workers N`` or ``--scheduler
ADDRESS`` contiguous index ranges of points (``--task-points``), one launch each, on a Dask
cluster (docs/campaigns.md). Each task has its own results directory
(``out/parts/<start>-<stop>``) whose JSON-lines file it follows for the progress bar (one tqdm
bar over every task, on stderr). The runner merges them by point index into
``build/crash/points.jsonl`` and writes ``build/crash/report.json`` (under the working
directory, or ``--out``): points tried / recovered / bit-identical, every failure with its
seed, cycle and error, and the measured figures; the same report for any split of the same
points, apart from :data:`WALL_CLOCK_FIELDS`. If the simulator dies mid-task (an RTL
assertion, a crash of the simulator), the point it was on is recorded as failed and a new
launch resumes after it; if a worker dies, the scheduler runs its task again. Exit status 1
on any failure, 2 on bad options or an unreachable cluster.
"""
from __future__ import annotations

import argparse
import inspect
import json
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cosim import build as cb
from cosim.csr_cpp import CSR_MODELS
from cosim.host_cpp import HOST_MODELS
from cosim.tb.config import PMEM_MODELS, BenchConfig
from trainingcxl import cluster

__all__ = ["main", "run_campaign", "run_part", "plan_parts", "merge_parts", "summarize",
           "CrashPart", "WALL_CLOCK_FIELDS"]

DEFAULT_OUT = Path("build", "crash")
# PMEM latencies (cycles): short reads keep a run short (the campaign replays most of a run per
# point), longer writes keep more writes in flight at a random instant
DEFAULT_LATENCY = 8
DEFAULT_WRITE_LATENCY = 16
# points per task on a cluster: each task repeats the reference run (about one point's time) and
# a lost worker loses at most one task's points
DEFAULT_TASK_POINTS = 100
# report fields that measure wall-clock time: the only ones in which a campaign on a cluster
# may differ from the serial campaign of the same points
WALL_CLOCK_FIELDS = ("build_s", "wall_s", "point_wall_s_mean")
# the PMEM model on the media port (cosim.tb.config.PMEM_MODELS): "cpp" (cosim.pmem_cpp, compiled
# into the simulator; the same build runs either) gives the same images and verdicts as "python"
# (cosim.pmem) for the same seed and points, in less time (docs/crash.md, "Speed")
DEFAULT_PMEM = "cpp"
# the campaign's workload (cosim.training_workload.make_workload arguments): a SNAPSHOT of
# 3000 bytes (47 lines, unaligned source) in every batch, lag bound k = 1 (MLP_LAG)
DEFAULT_WORKLOAD = {"snap_bytes": 3000, "snap_lag": 1}
# the extended workload (docs/crash.md, "Extended workload"): tables 0 and 2 of 2^20 rows (only
# the rows a batch reads are written), 8 bags of 0..12 rows per descriptor, 6 rows of one
# logged-set set in table 0's last bag of every batch, and error completions expected; with a
# log of 136 slots (--set log_size=78336 on fpga-ecp5: make crash-extended) batches fill the
# log and end in LOG_FULL
EXTENDED_WORKLOAD = {"snap_bytes": 3000, "snap_lag": 1, "rows": [1 << 20, 4096, 1 << 20],
                     "n_bags": 8, "pooling": 6, "hot_set": 6, "init": "touched",
                     "allow_errors": True}
# the overlap workload (docs/crash.md, "Overlap workload"): the default one plus, in every
# batch, a LOOKUP+LOG of 40 bags of 3 rows of table 2 the batch has not read, after its
# UPDATEs; each batch rung as two doorbells (the second: SNAPSHOT and COMMIT), and each
# doorbell's descriptors written during the previous one, so cuts find undo records in flight
# in the host's time and in a SNAPSHOT or COMMIT, and ring writes during descriptors
OVERLAP_WORKLOAD = {"snap_bytes": 3000, "snap_lag": 1, "late_lookup": 40,
                    "split_doorbell": True, "prewrite": True}
WORKLOADS = {"default": DEFAULT_WORKLOAD, "extended": EXTENDED_WORKLOAD,
             "overlap": OVERLAP_WORKLOAD}
EXTENDED_LOG_SIZE = 136 * 9 * 64      # 136 undo-log slots (a slot: header + 8 data lines)
# fraction of the points whose recovery is cut by a second power failure (nested failure)
DEFAULT_NESTED = 0.25
# fraction of the random points drawn inside the reference run's MLP snapshot copies
DEFAULT_SNAP_POINTS = 0.2


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


def _histogram(keys) -> dict:
    return dict(sorted(Counter(keys).items()))


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
        "mlp_histogram": _histogram(f"{p['mlp_slot']}:{p['mlp_epoch']}" for p in pts
                                    if p.get("mlp_slot") is not None),
        "points_in_snapshot_copy": sum(1 for p in pts if p.get("snap_writes_in_flight")
                                       or p.get("slots_torn")),
        "nested_points": sum(1 for p in pts if p.get("nested")),
        "nested_outcomes": {k: sum(1 for p in pts if p.get("nested_outcome") == k)
                            for k in ("again", "done")},
        "nested_words_survived": sum(p.get("nested_words_survived", 0) for p in pts),
        "nested_words_lost": sum(p.get("nested_words_lost", 0) for p in pts),
        "workload_cpl_errors": refs[0].get("cpl_errors", {}) if refs else None,
        "points_open_batch_log_full": sum(1 for p in pts
                                          if "LOG_FULL" in p.get("open_batch_errors", ())),
        "failures": failures,
    }
    return rep


@dataclass(frozen=True)
class CrashPart:
    """One task of a campaign: the points with indices in ``[start, stop)``, run in their own
    simulator launch (its own reference run) with results in ``out/attempt-<id>``
    (``points.jsonl``, one ``run<k>`` directory per launch;
    :func:`~trainingcxl.cluster.fresh_task_dir`). The other fields are the campaign's
    (:func:`run_campaign`).
    """
    start: int
    stop: int
    out: str
    build: cb.Build
    cfg: object
    points: str
    seed: int
    latency: int
    write_latency: int
    workload: dict
    via_host: bool
    chunk: int
    mutate: str
    max_restarts: int
    profile: str | None = None
    pmem: str = DEFAULT_PMEM
    replay: str = "open"
    nested: float = DEFAULT_NESTED
    snap_points: float = DEFAULT_SNAP_POINTS
    host: str = "python"
    csr: str = "python"


def run_part(part: CrashPart, *, progress=None) -> dict:
    """Run one :class:`CrashPart` (a campaign task, :mod:`trainingcxl.cluster`).

    Launches the simulator on the part's points; if it dies mid-point, that point is recorded
    as failed and a new launch resumes after it (up to ``max_restarts`` times). On a worker
    whose cache does not hold ``part.build`` (no shared filesystem) the build is made there,
    once per cache. ``progress(n)`` is called with the number of the part's points done.

    Returns
    -------
    dict
        ``records`` (the results lines), ``restarts`` and ``sim_errors``.
    """
    from trainingcxl.crash.tb import CrashParams

    build = part.build
    if not cb.is_built(build):
        own = BenchConfig(pmem=part.pmem, host=part.host, csr=part.csr).compiled_only
        build = cb.device_build(part.cfg, own_clock=own)
    out = cluster.fresh_task_dir(part.out)     # a re-run (its worker was lost) starts afresh
    results = out / "points.jsonl"
    results.write_text("")
    skip, restarts, sim_errors = part.start, 0, []
    while True:
        run_params = CrashParams(
            bench=BenchConfig(part.cfg, latency=part.latency, write_latency=part.write_latency,
                              pmem=part.pmem, host=part.host, csr=part.csr),
            seed=part.seed, points=part.points, skip=skip, stop=part.stop, chunk=part.chunk,
            workload=dict(part.workload), results=str(results), via_host=part.via_host,
            mutate=part.mutate, profile=part.profile, replay=part.replay,
            nested=part.nested, snap_points=part.snap_points)
        box = {}

        def target():
            try:
                box["res"] = cb.run(build, "trainingcxl.crash.tb", seed=part.seed,
                                    params=run_params, test_dir=out / f"run{restarts}",
                                    quiet=True)
            except cb.CosimError as e:
                box["err"] = e

        th = threading.Thread(target=target, daemon=True)
        th.start()
        while th.is_alive():
            th.join(1.0)
            if progress is not None:
                progress(len({r["i"] for r in _read_lines(results) if r.get("event") == "point"}))
        recs = _read_lines(results)
        done = {r["i"] for r in recs if r.get("event") == "point"}
        started = [r for r in recs if r.get("event") == "start" and r["i"] not in done]
        if "err" in box and started:
            # the simulator died during a point: record it and resume after it
            s = started[-1]
            sim_errors.append(str(box["err"])[-3000:])
            with open(results, "a") as f:
                f.write(json.dumps({"event": "point", "i": s["i"], "cycle": s["cycle"],
                                    "seed": part.seed, "ok": False, "recovered": False,
                                    "identical": False,
                                    "error": f"simulator died: {str(box['err'])[-1500:]}"})
                        + "\n")
            skip = s["i"] + 1
            restarts += 1
            if restarts <= part.max_restarts and skip < part.stop:
                continue
        elif "err" in box and not any(r.get("event") == "reference" for r in recs):
            sim_errors.append(str(box["err"])[-3000:])
        break
    return {"records": _read_lines(results), "restarts": restarts, "sim_errors": sim_errors}


def plan_parts(expected: int, *, workers: int | None = None,
               task_points: int = DEFAULT_TASK_POINTS) -> list[tuple[int, int]]:
    """Contiguous index ranges ``[start, stop)`` covering ``range(expected)``.

    ``workers=None`` (the serial campaign): one range, i.e. one launch, as before tasks
    existed. On a cluster: ranges of at most ``task_points`` points, and at least ``workers``
    ranges when there are enough points, so every worker gets work (a cluster that is still
    starting its workers reports 1, and still gets ranges of ``task_points``)."""
    if expected <= 0:
        return []
    if workers is None:
        return [(0, expected)]
    size = max(1, min(task_points, -(-expected // max(1, workers))))
    return [(a, min(a + size, expected)) for a in range(0, expected, size)]


def merge_parts(parts: list[dict]) -> tuple[list[dict], list[str]]:
    """The results lines of a whole campaign from its parts' (in index order): the first
    part's ``reference`` line, then every ``point`` line sorted by index (the last line of a
    point wins). Also returns the problems found: parts that disagree on the reference run
    (a campaign split into tasks is only the serial campaign if every launch sees the same
    reference run)."""
    refs = [r for p in parts for r in p["records"] if r.get("event") == "reference"]
    problems = []
    keys = ("cycles", "points", "batches", "latency", "write_latency", "phase_cycles",
            "snap_windows")
    if refs and any({k: r.get(k) for k in keys} != {k: refs[0].get(k) for k in keys}
                    for r in refs[1:]):
        problems.append("the tasks' reference runs differ: "
                        + "; ".join(str({k: r.get(k) for k in keys}) for r in refs))
    points = {}
    for p in parts:
        for r in p["records"]:
            if r.get("event") == "point":
                points[r["i"]] = r
    ref = [{**refs[0], "skip": 0}] if refs else []
    return ref + [points[i] for i in sorted(points)], problems


def run_campaign(*, points: str, seed: int, cfg=None, latency: int = DEFAULT_LATENCY,
                 write_latency: int = DEFAULT_WRITE_LATENCY, out: Path = DEFAULT_OUT,
                 workload: dict | None = None, via_host: bool = True, max_restarts: int = 5,
                 progress: bool = True, build=None, chunk: int = 25, mutate: str = "",
                 profile: Path | None = None, executor=None,
                 task_points: int = DEFAULT_TASK_POINTS, pmem: str = DEFAULT_PMEM,
                 replay: str = "open", nested: float = DEFAULT_NESTED,
                 snap_points: float = DEFAULT_SNAP_POINTS, host: str = "python",
                 csr: str = "python") -> dict:
    """Run a campaign; returns the report (also written to ``out/report.json``).

    ``executor`` (:mod:`trainingcxl.cluster`; default: serial, in this process) runs the
    campaign's parts (:func:`plan_parts`, :func:`run_part`), each in ``out/parts/<start>-<stop>``;
    their results are merged by point index into ``out/points.jsonl`` and one report, the same
    for any split of the same points (fields that measure wall-clock time excepted:
    :data:`WALL_CLOCK_FIELDS`). The simulator is built here, before any task starts, so every
    worker sharing this machine's cache (or a shared filesystem) finds it built. ``pmem``: the
    PMEM model, ``"cpp"`` or ``"python"`` (``cosim.build.device_build(cfg)`` carries both);
    ``host`` and ``csr``: the device driver's CXL.mem host and CSR master, the same choice.
    With all three compiled, the build is the top that makes its own clock
    (``device_build(own_clock=True)``, docs/crash.md "The top's own clock").
    """
    from hw.config import DeviceConfig
    from trainingcxl.cluster import SerialExecutor

    for name, value, allowed in (("pmem", pmem, PMEM_MODELS), ("host", host, HOST_MODELS),
                                 ("csr", csr, CSR_MODELS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    cfg = cfg or DeviceConfig()
    workload = dict(DEFAULT_WORKLOAD if workload is None else workload)
    executor = executor or SerialExecutor()
    out = Path(out).resolve()     # the runner and the workers may change directory
    out.mkdir(parents=True, exist_ok=True)
    results = out / "points.jsonl"
    results.write_text("")
    t0 = time.monotonic()
    if build is None:     # all models compiled: the top that makes its own clock
        own = BenchConfig(pmem=pmem, host=host, csr=csr).compiled_only
        build = cb.device_build(cfg, own_clock=own)
    t_build = time.monotonic() - t0
    expected = _expected_points(points)
    workers = None if isinstance(executor, SerialExecutor) else executor.workers
    ranges = plan_parts(expected, workers=workers, task_points=task_points)
    if (out / "parts").exists():
        shutil.rmtree(out / "parts")
    parts = [CrashPart(start=a, stop=b, out=str(out / "parts" / f"{a:06d}-{b:06d}"), build=build,
                       cfg=cfg, points=points, seed=seed, latency=latency,
                       write_latency=write_latency, workload=dict(workload or {}),
                       via_host=via_host, chunk=chunk, mutate=mutate, max_restarts=max_restarts,
                       pmem=pmem, replay=replay, nested=nested, snap_points=snap_points,
                       host=host, csr=csr,
                       profile=(str(Path(profile).resolve()) + ("" if len(ranges) == 1
                                                                else f".{a}"))
                       if profile else None)
             for a, b in ranges]
    done = executor.map(run_part, parts, weights=[b - a for a, b in ranges],
                        desc=f"crash seed {seed}", unit="pt", progress=progress)
    records, problems = merge_parts(done)
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    sim_errors = [e for d in done for e in d["sim_errors"]] + problems
    rep = summarize(records, requested=expected)
    rep.update(seed=seed, points_spec=points, latency=latency, write_latency=write_latency,
               chunk=chunk, mutate=mutate, config=json.loads(cfg.to_json()),
               workload=workload or {}, via_host=via_host, pmem=pmem, host=host, csr=csr,
               replay=replay, nested=nested, snap_points=snap_points,
               sim_restarts=sum(d["restarts"] for d in done), sim_errors=sim_errors,
               build_s=round(t_build, 1), wall_s=round(time.monotonic() - t0, 1),
               results=results.name)
    rep["ok"] = (rep["failed"] == 0 and not sim_errors and rep["tried"] == expected
                 and rep["identical"] == rep["tried"])
    (out / "report.json").write_text(json.dumps(rep, indent=2) + "\n")
    return rep


def _overrides(items: list[str]) -> dict:
    """``{field: int}`` from ``FIELD=INT`` strings (``--set``); DeviceConfig checks the values."""
    from dataclasses import fields

    from hw.config import DeviceConfig
    known = {f.name for f in fields(DeviceConfig)}
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in known:
            raise ValueError(f"{item!r} is not FIELD=INT with FIELD a DeviceConfig field "
                             f"({', '.join(sorted(known))})")
        try:
            out[name] = int(value, 0)
        except ValueError:
            raise ValueError(f"{item!r}: {value!r} is not an integer") from None
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="trainingcxl crash", description=__doc__.split("\n")[0])
    p.add_argument("--points", type=int, default=1000, help="seeded random crash points")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--range", dest="cycle_range", default=None,
                   help="A:B: crash at every cycle in [A, B) instead of random points")
    p.add_argument("--cycles", default=None, help="comma-separated crash cycles")
    p.add_argument("--config", default="default", help="named DeviceConfig (hw.config.CONFIGS)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=INT",
                   help="override one DeviceConfig field of --config (repeatable), e.g. "
                        "log_size=78336 for a log of 136 slots (576 bytes each)")
    p.add_argument("--latency", type=int, default=DEFAULT_LATENCY,
                   help="PMEM read latency (cycles)")
    p.add_argument("--write-latency", type=int, default=DEFAULT_WRITE_LATENCY,
                   help="PMEM write latency (cycles)")
    p.add_argument("--chunk", type=int, default=25,
                   help="crash images taken per pass of the workload")
    p.add_argument("--workload", default="default",
                   help="a named workload (" + ", ".join(f"{k}: {json.dumps(v)}"
                                                         for k, v in WORKLOADS.items())
                        + ") or JSON keyword arguments of make_workload ({}: no snapshots)")
    p.add_argument("--backdoor", action="store_true",
                   help="descriptors/completions backdoor instead of through the CXL.mem host")
    p.add_argument("--mutate", default="", choices=["", "wipe_log", "epoch_first", "wipe_slots"],
                   help="self-check: wipe_log erases the undo log from every crash image, so "
                        "points that crash inside a batch must fail; epoch_first gives every "
                        "nested failure the first image with the epoch already advanced, so "
                        "nested points that had rows to roll back must fail; wipe_slots erases "
                        "both MLP snapshot slot headers from every crash image")
    p.add_argument("--snap-points", type=float, default=DEFAULT_SNAP_POINTS,
                   help="fraction of the random points (seeded) drawn inside the reference "
                        f"run's MLP snapshot copies (default {DEFAULT_SNAP_POINTS})")
    p.add_argument("--nested", type=float, default=DEFAULT_NESTED,
                   help="fraction of the points (seeded) whose recovery is cut by a second "
                        f"power failure (default {DEFAULT_NESTED})")
    p.add_argument("--pmem", default=DEFAULT_PMEM, choices=PMEM_MODELS,
                   help="PMEM model on the media port: cpp (compiled into the simulator, the "
                        "same build) or python (cosim.pmem); same images and verdicts "
                        f"(default {DEFAULT_PMEM})")
    p.add_argument("--host", default="python", choices=HOST_MODELS,
                   help="the driver's CXL.mem host: python (cosim.cxl_host, the default) or "
                        "cpp (compiled into the simulator, cosim.host_cpp)")
    p.add_argument("--csr", default="python", choices=CSR_MODELS,
                   help="the driver's AXI4-Lite CSR master: python (cocotbext-axi, the "
                        "default) or cpp (compiled into the simulator, cosim.csr_cpp)")
    p.add_argument("--replay", default="open", choices=["open", "all"],
                   help="after recovery run the open batch C+1 only (default) or every batch "
                        "to the end; the model runs the same batches and the image outside "
                        "staging must equal it")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--profile", type=Path, default=None,
                   help="write cProfile statistics of the points loop here (on a cluster: one "
                        "file per task, suffixed with its first point)")
    p.add_argument("--task-points", type=int, default=DEFAULT_TASK_POINTS,
                   help="on a cluster: at most this many points per task (default "
                        f"{DEFAULT_TASK_POINTS}; each task repeats the reference run)")
    cluster.add_arguments(p)
    a = p.parse_args(argv)
    cluster.check_arguments(p, a)
    if a.task_points < 1:
        p.error(f"--task-points must be >= 1, got {a.task_points}")
    from hw.config import CONFIGS, named
    for name in ("nested", "snap_points"):
        if not 0.0 <= getattr(a, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(a, name)}")
    if a.points < 1 or a.latency < 1 or a.write_latency < 1 or a.chunk < 1:
        p.error("--points, --latency, --write-latency and --chunk must be >= 1")
    if a.config not in CONFIGS:
        p.error(f"--config {a.config!r}: one of {sorted(CONFIGS)}")
    cfg = named(a.config)
    try:
        cfg = cfg.with_(**_overrides(a.overrides))
    except (TypeError, ValueError) as e:
        p.error(f"--set: {e}")
    if a.workload in WORKLOADS:
        a.workload = dict(WORKLOADS[a.workload])
    else:
        try:
            a.workload = json.loads(a.workload)
        except json.JSONDecodeError as e:
            p.error(f"--workload is neither a name ({', '.join(WORKLOADS)}) nor JSON: {e}")
    if not isinstance(a.workload, dict):
        p.error("--workload must be a JSON object of make_workload keyword arguments")
    from cosim.training_workload import make_workload
    unknown = sorted(set(a.workload) - set(inspect.signature(make_workload).parameters)
                     - {"cfg", "seed"})
    if unknown:
        p.error(f"--workload: unknown make_workload arguments {unknown}")
    try:
        make_workload(cfg, a.seed, **a.workload)     # refuses bad values here, not in a task
    except (TypeError, ValueError, RuntimeError) as e:
        p.error(f"--workload: {e}")
    if a.cycles:
        spec = a.cycles
    elif a.cycle_range:
        spec = "range:" + a.cycle_range
    else:
        spec = f"random:{a.points}"
    try:
        with cluster.executor_from_args(a) as ex:
            print(f"crash campaign seed {a.seed} ({spec}): {ex.description}", flush=True)
            rep = run_campaign(points=spec, seed=a.seed, cfg=cfg,
                               latency=a.latency, write_latency=a.write_latency, chunk=a.chunk,
                               mutate=a.mutate, out=a.out, workload=a.workload,
                               via_host=not a.backdoor, progress=not a.no_progress,
                               profile=a.profile, executor=ex, task_points=a.task_points,
                               pmem=a.pmem, replay=a.replay, nested=a.nested,
                               snap_points=a.snap_points, host=a.host, csr=a.csr)
    except cluster.ClusterError as e:
        print(f"trainingcxl crash: {e}", file=sys.stderr)
        return 2
    print(f"crash campaign seed {a.seed} ({spec}): {rep['tried']} points tried, "
          f"{rep['recovered']} recovered, {rep['identical']} bit-identical, "
          f"{rep['failed']} failed; reference run {rep['reference_cycles']} cycles, "
          f"{rep['wall_s']} s (build {rep['build_s']} s); report {a.out / 'report.json'}")
    for f in rep["failures"][:10]:
        print(f"  FAIL point {f['i']} cycle {f['cycle']} seed {f['seed']}: {f['error']}")
    for e in rep["sim_errors"][:3]:
        print(f"  simulator error: {e[-600:]}")
    return 0 if rep["ok"] else 1

