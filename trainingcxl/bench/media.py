"""Simulated cycles of the main job under each media preset (docs/benchmarks.md "Media timing").

    python -m trainingcxl.bench.media [--batches 20] [--pmem cpp] [--out build/bench]

Runs ``trainingcxl train --batches N --crashes 0 --quiet --pmem M --media P`` for the presets
``ideal``, ``dram``, ``optane`` and ``optane`` with unlimited bandwidth (its latencies alone,
to separate what the bandwidth costs), and prints the exact cycle counts: the run's total and
the mean per batch of each phase, with the cycles responses waited for bandwidth. Cycle counts
do not depend on the machine; the C++ PMEM model (default) is cycle-identical to the Python one
and faster. Writes ``<out>/media.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# (name, extra options of trainingcxl train)
RUNS = (("ideal", ["--media", "ideal"]),
        ("dram", ["--media", "dram"]),
        ("optane, latency only", ["--media", "optane", "--read-bw", "none", "--write-bw", "none"]),
        ("optane", ["--media", "optane"]))
PHASES = ("lookup", "mlp", "update", "snapshot", "commit", "total")


def run_once(name: str, opts: list, batches: int, pmem: str, out: Path, seed: int) -> dict:
    d = out / ("media-" + name.replace(",", "").replace(" ", "-"))
    cmd = [sys.executable, "-m", "trainingcxl", "train", "--batches", str(batches),
           "--crashes", "0", "--quiet", "--pmem", pmem, "--seed", str(seed), "--out", str(d),
           *opts]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rtl = json.loads((d / "rtl_run.json").read_text())
    summ = json.loads((d / "summary.json").read_text())
    return {"name": name, "options": opts, "cycles": rtl["cycles"], "media": rtl["media"],
            "per_batch": {p: round(summ["cycles_per_batch"][p], 1) for p in PHASES},
            "wall_s": rtl["wall_s"]}


def main(argv=None) -> int:
    from cosim.tb.config import PMEM_MODELS
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.media",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--pmem", choices=PMEM_MODELS, default="cpp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("build/bench"))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, opts in RUNS:
        row = run_once(name, opts, a.batches, a.pmem, a.out, a.seed)
        rows.append(row)
        print(f"{name:22s} {row['cycles']:>9,} cycles  ({row['media']['timing']})", flush=True)
    base = rows[0]["cycles"]
    print(f"\n| media | cycles ({a.batches} batches) | vs ideal | per batch: "
          + " / ".join(PHASES) + " | R / W queueing cycles |\n|---|---|---|---|---|")
    for r in rows:
        pb = " / ".join(str(r["per_batch"][p]) for p in PHASES)
        print(f"| {r['name']} | {r['cycles']:,} | {r['cycles'] / base:.2f}x | {pb} | "
              f"{r['media']['r_queue_cycles']:,} / {r['media']['w_queue_cycles']:,} |")
    (a.out / "media.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
