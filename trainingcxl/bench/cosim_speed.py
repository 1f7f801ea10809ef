"""Co-simulation speed of the main job with each harness: the PMEM model, the CXL.mem host and
the CSR master in Python or compiled into the simulator, the golden-model twin inline or in
its own process, the device clocked by cocotb or by the simulation top itself.

    python -m trainingcxl.bench.cosim_speed [--batches 20] [--repeats 2] [--quick]
                                            [--out build/bench/cosim_speed.json]

Runs ``trainingcxl train --batches N --crashes 0 --quiet --pmem P --host H --csr C --twin T
--clock K`` for each harness of :data:`HARNESSES` (everything in Python; then one part compiled or moved
after the other, the last row being the main job's default), one run of each per round so all
see the same machine load, and reports simulated cycles per second of the training (``cycles /
wall_s`` of the run's ``rtl_run.json``: from the first power-on to the end of the final check;
the simulator's start and the golden-model reference runs excluded). Every run must agree with
its golden-model twin; runs with the same host and CSR master must end with the same cycle
count (the PMEM models are cycle-identical, and so are the two clocks; the twin does not touch
the simulation), and the harnesses' runs are the same training (tests/cosim/train). One
simulator build serves every harness clocked by cocotb, another the one clocked by the top
(``cosim.build.device_build``, ``own_clock``). Writes the rows as JSON (``harnesses``).

``--verilator`` (``make bench`` gives it) adds, in the same rounds, Verilator alone under the
training load (:func:`trainingcxl.bench.verilator_speed.training_replay`: a ``--batches N
--crashes 1`` run recorded cycle by cycle, replayed from C++ with no testbench, the default
configuration's Verilog with the cocotb builds' Verilator options, every output checked once),
three timed replays per round, and the ratio of the default harness's speed to the median of
those per round: what a testbench gets of what the model alone can do.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["HARNESSES", "run_once", "main"]

# (PMEM model, CXL.mem host, CSR master, golden-model twin, clock); the last is the default
HARNESSES = (("python", "python", "python", "inline", "cocotb"),
             ("cpp", "python", "python", "inline", "cocotb"),
             ("cpp", "cpp", "python", "inline", "cocotb"),
             ("cpp", "cpp", "cpp", "inline", "cocotb"),
             ("cpp", "cpp", "cpp", "process", "cocotb"),
             ("cpp", "cpp", "cpp", "process", "own"))
FIELDS = ("pmem", "host", "csr", "twin", "clock")


def run_once(pmem: str, host: str, csr: str, twin: str, clock: str, batches: int, out: Path,
             seed: int) -> dict:
    d = out / f"cosim_speed-{pmem}-{host}-{csr}-{twin}-{clock}"
    cmd = [sys.executable, "-m", "trainingcxl", "train", "--batches", str(batches),
           "--crashes", "0", "--quiet", "--pmem", pmem, "--host", host, "--csr", csr,
           "--twin", twin, "--clock", clock, "--seed", str(seed), "--out", str(d)]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {run.returncode}):\n{run.stdout}")
    rep = json.loads((d / "rtl_run.json").read_text())
    if not json.loads((d / "summary.json").read_text())["twin_equal"]:
        raise RuntimeError(f"{d}: the run disagreed with its golden-model twin")
    return {"pmem": pmem, "host": host, "csr": csr, "twin": twin, "clock": clock,
            "cycles": rep["cycles"],
            "wall_s": rep["wall_s"], "cycles_per_s": round(rep["cycles"] / rep["wall_s"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.bench.cosim_speed",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="smoke size: 4 batches, one round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("build/bench/cosim_speed.json"))
    ap.add_argument("--verilator", action="store_true",
                    help="also Verilator alone replaying the recorded training load, in the "
                         "same rounds, and the ratio")
    a = ap.parse_args(argv)
    if a.quick:
        a.batches, a.repeats = 4, 1
    if a.batches < 1 or a.repeats < 1:
        ap.error("--batches and --repeats must be at least 1")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    rows, alone = [], []
    print(f"co-simulation speed of the main job ({a.batches} batches, {a.repeats} rounds)",
          flush=True)
    replay = None
    if a.verilator:
        from trainingcxl.bench.verilator_speed import replay_rate, training_replay
        replay = training_replay(a.out.parent / "cosim_speed-verilator", max(a.batches, 3))
        print(f"  Verilator alone: replay of {replay[2]:,} recorded cycles built and checked",
              flush=True)
    with tempfile.TemporaryDirectory(prefix="cosim_speed-") as tmp:
        for r in range(a.repeats):
            for h in HARNESSES:
                row = run_once(*h, a.batches, Path(tmp), a.seed)
                row["repeat"] = r
                rows.append(row)
                print(f"  pmem {h[0]:6s} host {h[1]:6s} csr {h[2]:6s} twin {h[3]:7s} clock "
                      f"{h[4]:6s} round {r}: {row['cycles']} cycles in {row['wall_s']:.2f} s = "
                      f"{row['cycles_per_s']} cycles/s", flush=True)
            if replay is not None:
                rates = sorted(replay_rate(*replay) for _ in range(3))
                alone.append(round(rates[1]))
                print(f"  Verilator alone, training load, round {r}: {alone[-1]} cycles/s "
                      f"(median of 3 replays)", flush=True)
    for host, csr in {(h[1], h[2]) for h in HARNESSES}:
        cycles = {row["cycles"] for row in rows if (row["host"], row["csr"]) == (host, csr)}
        if len(cycles) != 1:
            print(f"host {host}, CSR master {csr}: cycle counts differ between runs: "
                  f"{sorted(cycles)}", file=sys.stderr)
            return 1
    print("\n| PMEM model | CXL.mem host | CSR master | twin | clock | cycles | wall s (each run) "
          "| cycles/s (each run) |\n|---|---|---|---|---|---|---|---|")
    for h in HARNESSES:
        mine = [row for row in rows if tuple(row[f] for f in FIELDS) == h]
        walls = ", ".join(f"{x['wall_s']:.2f}" for x in mine)
        speeds = ", ".join(str(x["cycles_per_s"]) for x in mine)
        print(f"| {' | '.join(h)} | {mine[0]['cycles']} | {walls} | {speeds} |")
    result = {"harnesses": rows, "verilator_alone": None}
    if alone:
        default = [row["cycles_per_s"] for row in rows
                   if tuple(row[f] for f in FIELDS) == HARNESSES[-1]]
        ratios = [round(x / y, 3) for x, y in zip(default, alone)]
        print(f"| Verilator alone, training load replayed (no testbench) | | | | | "
              f"{replay[2]} | | {', '.join(map(str, alone))} |")
        print(f"\ndefault harness / Verilator alone, per round: "
              f"{', '.join(f'{x:.2f}' for x in ratios)}")
        result["verilator_alone"] = {
            "cycles_per_s": alone, "recorded_cycles": replay[2], "replays_per_round": 3,
            "default_over_alone": ratios}
    a.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
