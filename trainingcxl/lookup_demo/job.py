"""``make lookup-demo``: the default LOOKUP workload through the RTL (Verilator) and the golden model.

    trainingcxl lookup-demo [--bags N] [--latency L] [--seed S] [--out build/demo/lookup.json]

Several tables (dims 16..128, Zipf-skewed indices with per-table skew, bag lengths uniform in
0..2*pooling) with a few thousand bags in all. Prints bags, rows, cycles, media-port
utilization, the link bytes with and without near-data pooling, and whether the RTL matched the
golden model (exit status 1 and the first mismatch if not).
"""
import argparse
import json
import pathlib
import sys
import time

from cosim import build as cb
from cosim.tb.config import BenchConfig
from hw.config import DeviceConfig
from hw.testtops.lookup_slice import SLICE_NAME, LookupSlice
from trainingcxl.lookup_demo.tb import LookupDemoParams

TABLES = [
    {"rows": 100_000, "dim": 16, "pooling": 40, "alpha": 1.1},
    {"rows": 50_000, "dim": 32, "pooling": 20, "alpha": 0.9},
    {"rows": 20_000, "dim": 64, "pooling": 10, "alpha": 1.2},
    {"rows": 5_000, "dim": 128, "pooling": 5, "alpha": 0.7},
]


def summarize(rep) -> str:
    t = rep["tables"]
    bags = sum(x["bags"] for x in t)
    rows = sum(x["rows_gathered"] for x in t)
    cycles = sum(x["cycles"] for x in t)
    media = sum(x["media_lines"] for x in t)
    row_bytes = sum(x["rows_gathered"] * x["dim"] * 4 for x in t)
    idx_bytes = sum(x["index_bytes"] + x["offset_bytes"] for x in t)
    out_bytes = sum(x["out_lines"] * 64 for x in t)
    without = row_bytes                      # host gathers every row itself
    with_ndp = idx_bytes + out_bytes         # host sends index lists, reads pooled rows
    ok = rep["first_mismatch"] is None
    lines = [
        "",
        "TrainingCXL demo: near-data LOOKUP (gather + sum-pool) on the RTL",
        f"  tables                 {len(t)} (dims {', '.join(str(x['dim']) for x in t)})",
        f"  bags                   {bags}",
        f"  rows gathered          {rows}  ({sum(x['row_lines'] for x in t)} lines of 64 B)",
        f"  cycles                 {cycles}  (PMEM latency {rep['spec']['latency']} cycles)",
        f"  media port utilization {media / cycles:.3f} lines/cycle "
        f"({media} lines read incl. index lists)",
        f"  saturated lanes        {sum(x['sat'] for x in t)}",
        f"  link bytes without near-data pooling  {without:>12,}  (every row to the host)",
        f"  link bytes with near-data pooling     {with_ndp:>12,}  (index lists + pooled rows)",
        f"  reduction              {without / max(1, with_ndp):.1f}x",
        "  RTL matches golden model" if ok else
        f"  RTL DIFFERS from golden model: {rep['first_mismatch']}",
    ]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trainingcxl lookup-demo", description=__doc__.splitlines()[0])
    ap.add_argument("--bags", type=int, default=1024, help="bags per table (default 1024)")
    ap.add_argument("--latency", type=int, default=100, help="PMEM latency in cycles")
    ap.add_argument("--seed", type=int, default=2023)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/demo/lookup.json"))
    args = ap.parse_args(argv)
    if args.bags < 1 or args.latency < 1:
        ap.error("--bags and --latency must be >= 1")
    cfg = DeviceConfig()
    run_params = LookupDemoParams(tables=TABLES, bags=args.bags, latency=args.latency,
                                  seed=args.seed, out=str(args.out.resolve()),
                                  bench=BenchConfig(cfg))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    print("building the device simulator (cached after the first run)...", flush=True)
    b = cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)
    print(f"running {len(TABLES)} tables x {args.bags} bags through RTL and golden model...",
          flush=True)
    if args.out.exists():
        args.out.unlink()
    err = None
    try:
        cb.run(b, "trainingcxl.lookup_demo.tb", seed=args.seed, capture=False,
               test_dir=args.out.parent / "run",
               params=run_params,
               extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
    except cb.CosimError as e:
        err = e
    if not args.out.exists():
        print(f"demo failed before producing results: {err}", file=sys.stderr)
        return 1
    rep = json.loads(args.out.read_text())
    print(summarize(rep))
    print(f"  wall time              {time.time() - t0:.0f} s; report {args.out}")
    return 0 if err is None else 1

