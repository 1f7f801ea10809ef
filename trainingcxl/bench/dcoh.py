"""DCOH benchmark: host read latency per snoop-filter case and host requests per cycle with and
without concurrent device reads (one Verilator build of the DCOH bench top).

    python -m trainingcxl.bench.dcoh [--quick] [--out build/bench/dcoh.json]

Latency (exact cycles, Req handshake → MemData handshake; the bench host answers BISnps at once):
``cur`` (MemRd SnpCur, no SF entry), ``miss`` (free way allocated), ``hit`` (S→A upgrade),
``victim`` (full set: BISnpInv, BIRspI, retry), ``conflict`` (early conflict: the upgrade meets a
device BISnpInv, BIConflict/Ack, BIRspI, then the Req is served). ``over_media`` = latency − the
PMEM read latency. Throughput: N back-to-back host requests to distinct lines (MemRd SnpCur,
MemRd A, MemWr, MemInv I), requests accepted per cycle, alone and with a device RdCur stream
at full rate sharing the media read port.
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import dcoh_top_build
from hw.config import DeviceConfig
from trainingcxl.bench.dcoh_tb import DcohBenchParams

FULL = dict(latency=[50, 100, 200], n=4000)
QUICK = dict(latency=[100], n=300)
CASES = ("cur", "miss", "hit", "victim", "conflict")


def run(grid, *, seed=1, out_dir=None, log=print):
    cfg = DeviceConfig()
    t0 = time.time()
    b = dcoh_top_build(cfg)
    log(f"  build in {time.time() - t0:.0f} s")
    lat_rows, tput_rows = [], []
    for lat in grid["latency"]:
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            tmp = pathlib.Path(tmp).resolve()
            # throughput only at the first latency (the rate does not depend on it while
            # host_reads covers it)
            flt = None if lat == grid["latency"][0] else "latency"
            cb.run(b, "trainingcxl.bench.dcoh_tb", seed=seed, test_dir=tmp / "run", capture=False,
                   test_filter=flt,
                   params=DcohBenchParams(bench=BenchConfig(cfg, latency=lat), n=grid["n"],
                                          out=str(tmp)),
                   extra_env={"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
            r = json.loads((tmp / "latency.json").read_text())
            lat_rows.append(r)
            for f in sorted(tmp.glob("tput_*.json")):
                tput_rows.append({**json.loads(f.read_text()), "latency": lat})
        log(f"  latency {lat}: done in {time.time() - t0:.0f} s")
    return lat_rows, tput_rows


def tables(lat_rows, tput_rows) -> str:
    out = ["host read latency (cycles, Req → MemData)",
           f"{'PMEM lat':>8} " + " ".join(f"{c:>9}" for c in CASES)]
    for r in lat_rows:
        out.append(f"{r['latency']:>8} " + " ".join(f"{r[c]:>9}" for c in CASES))
    out.append(f"{'+over':>8} " + " ".join(f"{lat_rows[0][c] - lat_rows[0]['latency']:>9}"
                                           for c in CASES))
    out += ["", "host requests per cycle (N back-to-back, distinct lines)",
            f"{'request':>10} {'alone':>7} {'w/ dev rd':>9} {'media rd/cyc (w/ dev)':>22}"]
    by = {(r["kind"], r["with_device"]): r for r in tput_rows}
    for k in ("read_cur", "read_own", "write", "inv"):
        a, d = by.get((k, False)), by.get((k, True))
        if a and d:
            out.append(f"{k:>10} {a['req_per_cycle']:>7.3f} {d['req_per_cycle']:>9.3f} "
                       f"{d['media_lines_per_cycle']:>22.3f}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.dcoh", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke size (one latency, 300 requests)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/bench/dcoh.json"))
    args = ap.parse_args(argv)
    grid = QUICK if args.quick else FULL
    print(f"DCOH benchmark: PMEM latency {grid['latency']}, {grid['n']} requests per point")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lat_rows, tput_rows = run(grid, out_dir=args.out.parent)
    for r in lat_rows:
        r["over_media"] = {c: r[c] - r["latency"] for c in CASES}
    print(tables(lat_rows, tput_rows))
    args.out.write_text(json.dumps({"grid": grid, "latency": lat_rows, "throughput": tput_rows},
                                   indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
