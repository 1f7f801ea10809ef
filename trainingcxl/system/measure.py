"""RTL measurements for the system model's cycle formulas: the full device under cocotb +
Verilator, every result checked against the golden model.

    python -m trainingcxl.system.measure [--set fit,held_out] [--out FILE] [--seed 1] [--append]

Writes ``trainingcxl/system/data/rtl_cycles.json`` (default): per point the workload, the
exact cycle counts of LOOKUP, UPDATE, COMMIT and SNAPSHOT and the command that measured them.
The fitted formulas (:mod:`trainingcxl.system.cycles`) are fitted on the ``fit`` points and
validated on the ``held_out``, ``blind`` and ``blind2`` ones; ``tests/system`` checks them
against this file without running the RTL. ``--append`` adds points to the file (numbered after
its points, their command, date and commit under ``appended``); each point's ``rng_key`` seeds
the generator its workload was drawn from.

Per point (one table of ``rows`` rows, ``n_bags`` bags of ``pooling`` indices, ``dim``; PMEM read
latency = write latency = ``latency`` cycles), on one device, in one simulator launch:

1. one batch LOOKUP+LOG, UPDATE, COMMIT rung together (``nogap``: the UPDATE waits for the
   LOOKUP's undo-record backlog to drain);
2. one batch with the UPDATE rung ``GAP`` cycles after the LOOKUP's completion (the host's MLP
   time), long enough for the backlog to drain;
3. a SNAPSHOT of ``snap_bytes`` bytes from staging, timed from its doorbell to the superblock's
   ``mlp_slot`` write being acknowledged.

The bench code is reused as it is: ``trainingcxl.bench.training_tb.TrainingBench`` (device
bring-up, one batch per call, timing from the PMEM model's write log, golden-model comparison
of completions, LOOKUP outputs and touched rows) and its ``Point`` workload, with its run
parameters (``TrainingBenchParams``). Every import from the bench and ``cosim`` is in this
module.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pathlib
import subprocess
import sys
import time

DATA_FILE = pathlib.Path(__file__).resolve().parent / "data" / "rtl_cycles.json"
GAP = 2500          # > the record buffer's worst backlog (1024 data lines + headers)
SNAP_OFFSET = 7     # SNAPSHOT source address: 7 bytes past a line (a misaligned copy)
U20 = 1 << 20

# (latency, dim, n_bags, pooling, dist, rows, snap_bytes). "hot": uniform over a 512-row table.
_FIT = [
    (32, 16, 64, 16, "uniform", U20, 4096),
    (100, 16, 64, 16, "uniform", U20, 16384),
    (200, 16, 64, 16, "uniform", U20, 65536),
    (300, 16, 64, 16, "uniform", U20, 16384),
    (100, 64, 64, 16, "uniform", U20, 8192),
    (100, 128, 32, 16, "uniform", U20, 32768),
    (100, 32, 128, 8, "uniform", U20, 4096),
    (100, 16, 256, 1, "uniform", U20, 1000),
    (100, 64, 128, 1, "uniform", U20, 65536),
    (100, 16, 32, 64, "uniform", U20, 16384),
    (200, 64, 32, 32, "uniform", U20, 4096),
    (100, 16, 64, 32, "uniform", 512, 32768),
    (200, 64, 64, 32, "uniform", 512, 16384),
    (32, 128, 16, 32, "uniform", U20, 65536),
    (300, 32, 64, 32, "uniform", U20, 8192),
    (50, 16, 128, 4, "zipf", U20, 24576),
    (12, 32, 64, 16, "uniform", U20, 8192),
]
_HELD_OUT = [
    (150, 32, 96, 12, "uniform", U20, 12288),
    (64, 64, 48, 24, "uniform", U20, 40000),
    (250, 16, 200, 2, "uniform", U20, 2048),
    (100, 128, 16, 8, "zipf", U20, 49152),
    (75, 16, 40, 48, "uniform", 512, 6000),
    (180, 64, 80, 6, "uniform", U20, 20480),
    (120, 32, 24, 40, "zipf", U20, 10240),
    (20, 16, 64, 24, "uniform", U20, 4096),
]
# measured after the formula forms were fixed (docs/system.md: a blind check of the forms)
_BLIND = [
    (40, 32, 32, 20, "uniform", U20, 3000),
    (90, 64, 24, 10, "zipf", U20, 30000),
    (220, 16, 96, 8, "uniform", U20, 12800),
    (160, 128, 8, 24, "uniform", U20, 7000),
    (60, 16, 48, 40, "uniform", 512, 50000),
    (280, 64, 40, 3, "uniform", U20, 2500),
]
# chosen after the UPDATE form with its read-port term was fixed (docs/system.md); an eighth
# field is the Zipf exponent (default 1.05)
_BLIND2 = [
    (70, 128, 24, 6, "zipf", U20, 20000),
    (170, 64, 12, 32, "zipf", U20, 9000),
    (45, 32, 80, 3, "zipf", U20, 1500, 1.3),
    (230, 16, 48, 24, "zipf", U20, 40000, 0.9),
    (110, 64, 20, 2, "zipf", U20, 5000),
    (260, 128, 10, 5, "zipf", U20, 12000, 1.2),
    (140, 32, 56, 10, "uniform", 2048, 15000),
    (25, 128, 6, 48, "uniform", U20, 60000),
]


def _point(t, role):
    lat, dim, bags, pool, dist, rows, snap, *alpha = t
    return dict(role=role, latency=lat, dim=dim, n_bags=bags, pooling=pool, dist=dist,
                rows=rows, snap_bytes=snap, **({"alpha": alpha[0]} if alpha else {}))


POINTS = {"fit": [_point(t, "fit") for t in _FIT],
          "held_out": [_point(t, "held_out") for t in _HELD_OUT],
          "blind": [_point(t, "blind") for t in _BLIND],
          "blind2": [_point(t, "blind2") for t in _BLIND2]}
QUICK = [dict(role="smoke", latency=100, dim=16, n_bags=8, pooling=4, dist="uniform",
              rows=4096, snap_bytes=256)]


# ------------------------------------------------------------------------------------------
# cocotb side (runs inside the simulator)
# ------------------------------------------------------------------------------------------
def _cocotb_test():
    import cocotb

    @cocotb.test()
    async def system_cycles(dut):
        """Every point of the run's ``TrainingBenchParams.points``: a batch without and with
        the MLP gap, then a SNAPSHOT; completions, LOOKUP outputs, touched rows and snapshot
        slots equal the golden model's."""
        import numpy as np

        from cosim import params
        from trainingcxl.bench.training_tb import (CFG as cfg, RING, WAIT, Point, TrainingBench,
                                                   TrainingBenchParams)
        from cosim.device_driver import DeviceDriver
        from hw.encodings import CPL_BYTES, CPL_FIELDS, DESC_BYTES, unpack_fields
        from sw_model.training import snap_slot_addr

        spec = params.load(TrainingBenchParams)
        points, out = spec.points, pathlib.Path(spec.out)
        tb = TrainingBench(dut)
        await tb.start()
        failures = []
        for i, p in enumerate(points):
            w0 = time.time()
            rng = np.random.default_rng([tb.seed, i])
            pt = Point(p, rng, tb.talloc, tb.salloc)
            for mem in (tb.rtl_mem, tb.model_mem):
                pt.load_rows(mem)
                for a, data in pt.staging():
                    mem.write(a, data)
            tb.pmem.read_latency = tb.pmem.write_latency = p["latency"]
            await tb.set_table(pt)
            runs = []
            for gap in (None, GAP):
                r = await tb.run(pt, "b", gap)
                slot = (tb.tail - 1) % RING                       # the COMMIT's slot
                caddr = tb.cpl_base + CPL_BYTES * slot
                cpl = unpack_fields(CPL_FIELDS, tb.rtl_mem.read(caddr, CPL_BYTES))
                cw = [w for w in tb.pmem.write_log if w.addr == caddr]
                r["commit_cycles"] = int(cpl["cycles"])
                r["commit_log_records"] = int(cpl["log_records"])
                r["commit_end"] = cw[-1].b_cycle if cw else None
                if not r["match"]:
                    failures.append(f"point {i} gap {gap}: {r['mismatch']}")
                r.pop("perf", None)
                runs.append(r)
            # SNAPSHOT of snap_bytes from staging, epoch = the committed batch
            n = p["snap_bytes"]
            src = tb.salloc.alloc(n + 64) + SNAP_OFFSET             # any byte alignment
            payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            for mem in (tb.rtl_mem, tb.model_mem):
                mem.write(src, payload)
            tb.tag += 1
            desc = DeviceDriver.snapshot_desc(tb.batch, src, n, tb.tag)
            want = unpack_fields(CPL_FIELDS, tb.model.execute(desc))
            slot = tb.tail
            tb.rtl_mem.write(tb.ring_base + DESC_BYTES * slot, desc)
            tb.pmem.write_log.clear()
            t_db = await tb.doorbell((slot + 1) % RING)
            await tb.drv.wait_head((slot + 1) % RING, WAIT)
            await tb.drv.wait_snapshot_idle(WAIT)
            tb.tail = (slot + 1) % RING
            caddr = tb.cpl_base + CPL_BYTES * slot
            got = unpack_fields(CPL_FIELDS, tb.rtl_mem.read(caddr, CPL_BYTES))
            sb = cfg.superblock_base
            flips = [w.b_cycle for w in tb.pmem.write_log if sb <= w.addr < sb + 64]
            cpl_end = [w.b_cycle for w in tb.pmem.write_log if w.addr == caddr]
            bad = [f"{f}: model {want[f]} RTL {got[f]}" for f in want
                   if f not in ("cycles", "seq") and int(want[f]) != int(got[f])]
            span = 64 + -(-n // 64) * 64
            for s in (0, 1):
                a = snap_slot_addr(cfg, s)
                if tb.rtl_mem.read(a, span) != tb.model_mem.read(a, span):
                    bad.append(f"snapshot slot {s} differs from the model")
            if bad:
                failures.append(f"point {i} snapshot: {bad}")
            snap = {"match": not bad, "mismatch": bad, "t_db": t_db,
                    "cpl_end": cpl_end[-1] if cpl_end else None,
                    "flip_end": max(flips) if flips else None,
                    "snapshot_span": (max(flips) - t_db) if flips else None,
                    "lines": int(got["lines"])}
            # rng_key: the workload's generator seed, default_rng(rng_key) (``point`` is
            # renumbered when --append adds to a file)
            res = {**p, "point": i, "seed": tb.seed, "rng_key": [tb.seed, i],
                   "snap_offset": SNAP_OFFSET, "distinct_rows": int(len(pt.touched)),
                   "lookups": int(len(pt.indices)), "runs": runs, "snapshot": snap,
                   "wall_s": round(time.time() - w0, 1)}
            (out / f"{i}.json").write_text(json.dumps(res))
            print(f"  point {i} ({p['role']}, lat {p['latency']}, dim {p['dim']}, "
                  f"{p['n_bags']}x{p['pooling']} {p['dist']}): critical "
                  + ", ".join(str(r["critical"]) for r in runs)
                  + f", snapshot {snap['snapshot_span']}  [{res['wall_s']} s]", flush=True)
        assert not failures, f"RTL differs from the golden model (seed {tb.seed}): {failures}"

    return system_cycles


if os.environ.get("TRAININGCXL_RUN_PARAMS"):     # imported by the simulator (cosim.params)
    system_cycles = _cocotb_test()


# ------------------------------------------------------------------------------------------
# launcher
# ------------------------------------------------------------------------------------------
def _git(*args) -> str:
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def derive(p: dict) -> dict:
    """The cycle figures the formulas are fitted to, from one point's raw runs."""
    nogap, gap = p["runs"]
    lookup_span = gap["lk_end"] - gap["t_db"]
    return {
        # doorbell to completion record persistent, LOOKUP+LOG
        "lookup": lookup_span,
        # UPDATE doorbell (after the MLP gap, backlog drained) to its completion persistent
        "update": gap["critical_minus_gap"] - lookup_span,
        # LOOKUP doorbell to UPDATE completion with both rung together (backlog not drained)
        "critical_nogap": nogap["critical"],
        "commit_cycles": gap["commit_cycles"],
        # fetch + completion write around a command: doorbell-to-persistent minus ``cycles``
        "descriptor_overhead": lookup_span - gap["lookup_cycles"],
        "snapshot": p["snapshot"]["snapshot_span"],
        "log_records": gap["lookup_log_records"],
        "update_lines": gap["update_lines"],
    }


def run(points, *, seed=1, log=print):
    """The points through the training bench's launcher with this module's cocotb test; the
    results written, the error of a failed launch (or None), and the hw source digest."""
    from cosim import build as cb
    from trainingcxl.bench import training

    out_dir = pathlib.Path("build").resolve()
    out_dir.mkdir(exist_ok=True)
    rows, err = training.run(points, seed=seed, out_dir=out_dir, log=log,
                             test_module="trainingcxl.system.measure")
    return rows, err, cb._hw_source_digest()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.system.measure",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="fit,held_out",
                    help="comma-separated point sets: fit, held_out, blind, blind2, quick "
                         "(default fit,held_out)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=pathlib.Path, default=DATA_FILE)
    ap.add_argument("--append", action="store_true",
                    help="add the new points to --out's existing points (numbered after them) "
                         "instead of replacing the file")
    args = ap.parse_args(argv)
    points = []
    for s in args.set.split(","):
        if s == "quick":
            points += QUICK
        elif s in POINTS:
            points += POINTS[s]
        else:
            ap.error(f"--set: unknown point set {s!r} ({', '.join(POINTS)}, quick)")
    cmd = "python -m trainingcxl.system.measure " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])
    print(f"system-model RTL measurements: {len(points)} points, seed {args.seed}")
    t0 = time.time()
    rows, err, digest = run(points, seed=args.seed)
    ok = err is None and len(rows) == len(points) and all(
        r["snapshot"]["match"] and all(x["match"] for x in r["runs"]) for r in rows)
    for r in rows:
        r["measured"] = derive(r)
    doc = {
        "command": cmd.strip(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": _git("rev-parse", "HEAD"),
        "hw_source_digest": digest,
        "device_config": "default (hw.config.DeviceConfig())",
        "simulator": "Verilator 5.048 via cocotb 2.1 (cosim.build.device_build)",
        "seed": args.seed, "gap": GAP, "ok": ok, "error": err,
        "wall_s": round(time.time() - t0),
        "units": "clock cycles of the device (PMEM model latency in the same cycles)",
        "points": rows,
    }
    if args.append and args.out.exists():
        old = json.loads(args.out.read_text())
        base = len(old["points"])
        for r in rows:
            r["point"] += base
        doc = {**old, "ok": old["ok"] and ok,
               "appended": old.get("appended", []) + [{k: doc[k] for k in (
                   "command", "date", "git_commit", "hw_source_digest", "seed", "ok", "error",
                   "wall_s")} | {"points": [r["point"] for r in rows]}],
               "points": old["points"] + rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{'role':>8} {'lat':>4} {'dim':>4} {'bags':>5} {'pool':>4} {'distinct':>8} "
          f"{'lookup':>7} {'update':>7} {'nogap':>7} {'commit':>6} {'snap B':>7} {'snap':>6}")
    for r in rows:
        m = r["measured"]
        print(f"{r['role']:>8} {r['latency']:>4} {r['dim']:>4} {r['n_bags']:>5} "
              f"{r['pooling']:>4} {r['distinct_rows']:>8} {m['lookup']:>7} {m['update']:>7} "
              f"{m['critical_nogap']:>7} {m['commit_cycles']:>6} {r['snap_bytes']:>7} "
              f"{m['snapshot']:>6}")
    if err:
        print(f"SIMULATION FAILED after {len(rows)} of {len(points)} points: {err}")
    print(f"every run matched the golden model: {ok}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
