"""LOOKUP throughput benchmark: media read-port utilization vs PMEM latency, pooling, dim and the
outstanding-read limit (one Verilator build per limit).

    python -m trainingcxl.bench.gather_reduce [--quick] [--out build/bench/gather_reduce.json]

Metrics per point (exact simulation cycles, command accepted -> completion received):
- ``lines_per_cycle``: embedding-row lines gathered per cycle;
- ``port_util``: all lines read from the media port (rows + index/offset lists) per cycle, i.e.
  utilization of the 1 line/cycle read port over the whole command, fill and drain included;
- ``steady_port_util``: the sustained rate, over the middle half of the command's duration.
  A command starts with three dependent round trips (offsets, then indices, then rows) and ends
  with the write acknowledgements, so end-to-end utilization approaches the sustained one only
  for long commands.
Target (architecture 7): sustained port utilization >= 0.95 for pooling >= 8 whenever max_reads
covers the latency (Little's law; ``little_ok``). Both figures are printed and saved.
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
from hw.testtops.lookup_slice import SLICE_NAME, LookupSlice
from trainingcxl.bench.gather_reduce_tb import GatherBenchParams

FULL = dict(max_reads=[64, 128, 256, 512], latency=[50, 100, 200, 400], pooling=[1, 8, 32, 100],
            dim=[16, 64])
QUICK = dict(max_reads=[256], latency=[100], pooling=[1, 8], dim=[16])
TARGET = 0.95


def points_for(grid, lines):
    return [{"latency": lat, "pooling": p, "dim": d, "lines": max(lines, 20 * lat)}
            for lat in grid["latency"] for p in grid["pooling"] for d in grid["dim"]]


def run(grid, *, lines, seed=1, out_dir=None, log=print):
    rows = []
    for mr in grid["max_reads"]:
        cfg = DeviceConfig(max_reads=mr)
        t0 = time.time()
        b = cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)
        pts = points_for(grid, lines)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            tmp = pathlib.Path(tmp).resolve()    # the simulator runs in its own directory
            cb.run(b, "trainingcxl.bench.gather_reduce_tb", seed=seed, test_dir=tmp / "run",
                   capture=False,
                   params=GatherBenchParams(bench=BenchConfig(cfg), points=pts, out=str(tmp)),
                   extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
            got = [json.loads((tmp / f"{i}.json").read_text()) for i in range(len(pts))]
        rows += got
        log(f"  max_reads={mr}: {len(got)} points in {time.time() - t0:.0f} s")
    return rows


def table(rows) -> str:
    head = (f"{'max_rd':>6} {'lat':>4} {'pool':>4} {'dim':>3} {'row lines':>9} {'cycles':>7} "
            f"{'lines/cyc':>9} {'port util':>9} {'sustained':>9}  note")
    out = [head, "-" * len(head)]
    for r in rows:
        note = ""
        if r["pooling"] >= 8 and r["little_ok"]:
            note = "target met" if r["steady_port_util"] >= TARGET else f"BELOW {TARGET:.0%}"
        out.append(f"{r['max_reads']:>6} {r['latency']:>4} {r['pooling']:>4} {r['dim']:>3} "
                   f"{r['row_lines']:>9} {r['cycles']:>7} {r['lines_per_cycle']:>9.3f} "
                   f"{r['port_util']:>9.3f} {r['steady_port_util']:>9.3f}  {note}")
    return "\n".join(out)


def summary(rows) -> dict:
    tgt = [r for r in rows if r["pooling"] >= 8 and r["little_ok"]]
    worst = min(tgt, key=lambda r: r["steady_port_util"]) if tgt else None
    return {"target": TARGET, "target_points": len(tgt),
            "target_met": sum(r["steady_port_util"] >= TARGET for r in tgt),
            "worst_target_point": worst}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.gather_reduce",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke size (one build, two points)")
    ap.add_argument("--lines", type=int, default=4000,
                    help="row lines per point (at least 12 x latency)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/bench/gather_reduce.json"))
    args = ap.parse_args(argv)
    grid = QUICK if args.quick else FULL
    n = len(points_for(grid, args.lines)) * len(grid["max_reads"])
    print(f"gather-reduce benchmark: {n} points, {len(grid['max_reads'])} builds")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = run(grid, lines=1000 if args.quick else args.lines, out_dir=args.out.parent)
    print(table(rows))
    s = summary(rows)
    print(f"target {TARGET:.0%} sustained port utilization at pooling >= 8 with max_reads >= latency + 8: "
          f"met in {s['target_met']} of {s['target_points']} points")
    args.out.write_text(json.dumps({"grid": grid, "points": rows, "summary": s}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
