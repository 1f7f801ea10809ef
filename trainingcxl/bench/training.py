"""Training-step benchmark on the full device: LOOKUP issue to UPDATE completion, with and without
undo logging, exact simulation cycles (one Verilator build of the device top, default config).

    python -m trainingcxl.bench.training [--quick] [--out build/bench/training.json]

Per point (table of ``rows`` rows, ``dim``, ``n_bags`` bags of ``pooling`` indices, uniform or
Zipf-skewed; PMEM read = write latency) and per run, one batch LOOKUP, UPDATE, COMMIT:

- ``a`` no logging (LOOKUP without LOG, UPDATE flag NOLOG) — unsafe baseline;
- ``b`` logging during LOOKUP (LOOKUP with LOG, UPDATE normal: rows already logged);
- ``c`` synchronous logging at UPDATE (LOOKUP without LOG, UPDATE normal).

``critical`` = cycles from the LOOKUP's doorbell (CMD_TAIL write acknowledged) to the UPDATE's
completion record being persistent (its B handshake on ``m_axi``) — the architecture's
critical path (LOOKUP issue to UPDATE completion). Each mode is run twice: LOOKUP and UPDATE
rung together (``gap`` 0), and with an "MLP wait" (the UPDATE rung ``gap`` cycles after the
LOOKUP completed, ``gap`` = run a's LOOKUP duration), during which the LOOKUP's undo records
drain; ``critical - gap`` is then the device's share.

Reported: overhead of b over a (target <= 2 %), speedup of b over c, update-engine write-port
utilisation (row lines written / PERF_CYC_UPDATE delta; also the row-write span on ``m_axi``),
undo records, logged-set overflows. Every run's completions, LOOKUP output and touched table rows
are checked against the golden model (sw_model.training) in the simulation.
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

from cosim import build as cb
from cosim.tb.config import BenchConfig
from hw.config import DeviceConfig
from trainingcxl.bench.training_tb import TrainingBenchParams

# "BIG": 1024 lookups per batch (64 bags x 16) over 2^20 rows, uniform or Zipf 1.05 (shuffled
# ranks). The synchronous-logging runs cost about (latency + 110) cycles per row logged at
# UPDATE, so 2048 lookups would double the bench's time. "HOT": 2048 lookups (64 x 32),
# uniform over a 512-row table, which fills the logged set (256 sets x 2 ways) exactly: with
# h = (row ^ row >> 8) & 255 every set receives exactly two of the 512 rows, so no set overflows.
BIG = dict(rows=1 << 20, n_bags=64, pooling=16)
HOT = dict(rows=512, n_bags=64, pooling=32, dist="uniform")
FULL = ([{**BIG, "latency": 100, "dim": d, "dist": dist} for dist in ("uniform", "zipf")
         for d in (16, 64)]
        + [{**HOT, "latency": lat, "dim": d} for lat in (100, 200) for d in (16, 64)])
QUICK = [dict(rows=4096, n_bags=8, pooling=6, latency=100, dim=16, dist="zipf", gap_c=True)]
TARGET_OVERHEAD = 0.02
TARGET_UTIL = 0.90


def run(points, *, seed=1, out_dir=None, log=print, test_module="trainingcxl.bench.training_tb"):
    """Run ``points`` in one simulator launch of the default device; ``test_module`` is the
    cocotb module (it reads ``TrainingBenchParams``; point ``i`` writes ``<i>.json``). Returns
    the points' results that were written and the error text of a failed launch (or None)."""
    cfg = DeviceConfig()
    t0 = time.time()
    b = cb.device_build(cfg)
    log(f"  build in {time.time() - t0:.0f} s")
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp = pathlib.Path(tmp).resolve()
        err = None
        try:
            cb.run(b, test_module, seed=seed, test_dir=tmp / "run",
                   capture=False,
                   params=TrainingBenchParams(bench=BenchConfig(cfg), points=list(points),
                                              seed=seed, out=str(tmp)),
                   extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
        except cb.CosimError as e:      # keep the points that finished
            err = str(e)[-2000:]
        rows = [json.loads((tmp / f"{i}.json").read_text()) for i in range(len(points))
                if (tmp / f"{i}.json").exists()]
    log(f"  {len(rows)} of {len(points)} points in {time.time() - t0:.0f} s")
    return rows, err


def summarize(p) -> dict:
    """Per gap variant: critical paths of a/b/c, overhead b/a, speedup c/b, utilisation. Without
    a measured c+gap run, c+gap = c + (b's actual gap), marked ``c_derived``."""
    out = {}
    nogap = {r["mode"]: r for r in p["runs"] if not r["gap"]}
    for gv in ("nogap", "gap"):
        rs = {r["mode"]: r for r in p["runs"] if bool(r["gap"]) == (gv == "gap")}
        if "a" not in rs or "b" not in rs:
            continue
        derived = "c" not in rs
        if derived:
            c = dict(nogap["c"])
            c["critical"] = c["critical"] + rs["b"]["gap_actual"]
            c["gap_actual"] = rs["b"]["gap_actual"]
            rs["c"] = c
        cr = {m: rs[m]["critical"] for m in "abc"}
        dev = {m: rs[m]["critical_minus_gap"] for m in "abc"}
        out[gv] = {
            "critical": cr, "critical_minus_gap": dev, "c_derived": derived,
            "gap_actual": rs["b"]["gap_actual"],
            "overhead_b_over_a": cr["b"] / cr["a"] - 1,
            "overhead_b_over_a_device": dev["b"] / dev["a"] - 1,
            "speedup_b_over_c": cr["c"] / cr["b"],
            "util_perf": {m: round(rs[m]["util_perf"], 4) for m in "abc"},
            "util_row_span": {m: round(rs[m]["util_row_span"], 4) for m in "abc"},
            "lookup_cycles": {m: rs[m]["lookup_cycles"] for m in "abc"},
            "update_cycles": {m: rs[m]["update_cycles"] for m in "abc"},
            "log_records": {m: (rs[m]["lookup_log_records"], rs[m]["update_log_records"])
                            for m in "abc"},
            "set_overflow": {m: rs[m]["perf"]["PERF_SET_OVERFLOW"] for m in "abc"},
            "log_writes_after_lookup": {m: rs[m]["log_writes_after_lookup"] for m in "abc"},
        }
    out["match"] = all(r["match"] for r in p["runs"])
    return out


def table(points) -> str:
    head = (f"{'lat':>4} {'dim':>3} {'dist':>7} {'table':>7} {'distinct':>8} {'gap':>6} "
            f"{'a':>8} {'b':>8} {'c':>8} "
            f"{'b/a-1':>7} {'c/b':>6} {'dev b/a-1':>9} {'util a':>6} {'util b':>6} "
            f"{'span a':>6} {'span b':>6} {'recs b(lk,up)':>13} {'ovfl b':>6}")
    out = [head, "-" * len(head)]
    for p in points:
        s = p["summary"]
        for gv in ("nogap", "gap"):
            if gv not in s:
                continue
            x = s[gv]
            cr, ub, us = x["critical"], x["util_perf"], x["util_row_span"]
            gap = p["mlp_gap"] if gv == "gap" else 0
            out.append(
                f"{p['latency']:>4} {p['dim']:>3} {p['dist']:>7} {p['rows']:>7} "
                f"{p['distinct_rows']:>8} "
                f"{gap:>6} {cr['a']:>8} {cr['b']:>8} {cr['c']:>8} "
                f"{x['overhead_b_over_a']:>7.1%} {x['speedup_b_over_c']:>6.2f} "
                f"{x['overhead_b_over_a_device']:>9.1%} {ub['a']:>6.3f} {ub['b']:>6.3f} "
                f"{us['a']:>6.3f} {us['b']:>6.3f} {str(tuple(x['log_records']['b'])):>13} "
                f"{x['set_overflow']['b']:>6}")
    out += ["", "b/a-1: overhead of b over a on the critical path (target <= 2 %); dev: the same "
            "without the MLP gap; c/b: speedup of b over c;",
            "util: UPDATE row lines written / PERF_CYC_UPDATE delta (whole UPDATE, fill and "
            "drain included); span: row lines / cycles from first to last row write on m_axi "
            f"(target >= {TARGET_UTIL:.0%});",
            "recs b: undo records written by b's LOOKUP and UPDATE; ovfl b: logged-set "
            "overflows in b (rows re-logged synchronously at UPDATE). gap: the UPDATE is rung "
            "that many cycles after the LOOKUP completed (c+gap derived = c + gap)."]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.training",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke size (one tiny point)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/bench/training.json"))
    args = ap.parse_args(argv)
    pts = QUICK if args.quick else FULL
    print(f"training-step benchmark: {len(pts)} points x (a, b, c without gap; a, b with the "
          f"MLP gap)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows, err = run(pts, seed=args.seed, out_dir=args.out.parent)
    for p in rows:
        p["summary"] = summarize(p)
    print("critical path (cycles, LOOKUP doorbell -> UPDATE completion persistent); "
          "a = no log, b = log in LOOKUP, c = sync log in UPDATE")
    print(table(rows))
    ok = err is None and len(rows) == len(pts) and all(p["summary"]["match"] for p in rows)
    if err:
        print(f"SIMULATION FAILED after {len(rows)} of {len(pts)} points: {err}")
    print(f"every run's completions, outputs and table rows matched the golden model: {ok}")
    args.out.write_text(json.dumps({"seed": args.seed, "ok": ok, "error": err,
                                    "targets": {"overhead_b_over_a": TARGET_OVERHEAD,
                                                "update_write_util": TARGET_UTIL},
                                    "points": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
