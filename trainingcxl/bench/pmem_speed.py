"""Co-simulation speed of the main job with the Python and with the C++ PMEM model.

    python -m trainingcxl.bench.pmem_speed [--batches 20] [--repeats 2] [--out build/bench]

Runs ``trainingcxl train --batches N --crashes 0 --quiet --pmem M`` for M = python and cpp,
alternating (python, cpp, python, cpp, ...) so both see the same machine load, and reports
simulated cycles per second of the training (``cycles / wall_s`` of the run's
``rtl_run.json``: from the first power-on to the last batch, the simulator's start and the
reference runs excluded). Both runs must end with the same cycle count (the C++ model is
cycle-identical). Writes ``<out>/pmem_speed.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from cosim.tb.config import PMEM_MODELS


def run_once(model: str, batches: int, out: Path, seed: int) -> dict:
    d = out / f"pmem_speed-{model}"
    cmd = [sys.executable, "-m", "trainingcxl", "train", "--batches", str(batches),
           "--crashes", "0", "--quiet", "--pmem", model, "--seed", str(seed), "--out", str(d)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rep = json.loads((d / "rtl_run.json").read_text())
    return {"model": model, "cycles": rep["cycles"], "wall_s": rep["wall_s"],
            "cycles_per_s": round(rep["cycles"] / rep["wall_s"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.pmem_speed",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("build/bench"))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in range(a.repeats):
        for m in PMEM_MODELS:
            row = run_once(m, a.batches, a.out, a.seed)
            row["repeat"] = r
            rows.append(row)
            print(f"{m:6s} repeat {r}: {row['cycles']} cycles in {row['wall_s']} s = "
                  f"{row['cycles_per_s']} cycles/s", flush=True)
    cycles = {row["cycles"] for row in rows}
    if len(cycles) != 1:
        print(f"cycle counts differ between runs: {sorted(cycles)}", file=sys.stderr)
        return 1
    print("\n| PMEM model | cycles | wall s (each run) | cycles/s (each run) |\n|---|---|---|---|")
    for m in PMEM_MODELS:
        mine = [row for row in rows if row["model"] == m]
        print(f"| {m} | {mine[0]['cycles']} | {', '.join(str(x['wall_s']) for x in mine)} | "
              f"{', '.join(str(x['cycles_per_s']) for x in mine)} |")
    (a.out / "pmem_speed.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
