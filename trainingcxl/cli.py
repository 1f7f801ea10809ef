"""``trainingcxl``: one command for the project's jobs.

    trainingcxl <command> [options]        (trainingcxl <command> --help for its options)

Each command is the ``main(argv)`` of one module of this package (``hw.gen`` for ``verilog``),
and each ``make`` target runs its command, so the two never disagree. Commands
are listed by :data:`COMMANDS`; unknown commands and bad options exit with status 2 and a
message naming them.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module with main(argv) -> int, one-line help, who uses it)
COMMANDS = {
    "train": ("trainingcxl.train.job", "train the DLRM with the RTL in the loop, cutting power at "
              "seeded points (make demo)", "everyone"),
    "study": ("trainingcxl.study", "relaxed-ordering study: final AUC and lost work for lag "
              "bounds k under one failure schedule (make study)", "architects"),
    "data": ("trainingcxl.data", "generate a synthetic click log or convert Criteo TSV into "
             "the npz format", "everyone"),
    "compare": ("trainingcxl.compare", "compare two boundary traces (RTL vs model) by the rules "
                "that hold; exit 1 on the first divergence", "verification"),
    "crash": ("trainingcxl.crash.campaign", "power-failure campaign on the RTL (make crash)",
              "verification"),
    "test": ("trainingcxl.regression", "run the regression (make test)", "verification"),
    "coverage": ("trainingcxl.coverage.cli", "code (line, toggle) and functional coverage of the "
                 "RTL under chosen cosim areas (make coverage)", "verification"),
    "bench": ("trainingcxl.bench.run", "benchmarks: cycle counts, JSON reports (make bench)",
              "architects"),
    "verilog": ("hw.gen", "generate Verilog of the device for FPGA prototyping (make verilog)",
                "FPGA"),
    "synth": ("trainingcxl.synth", "ECP5 synthesis and place-and-route with YoWASP (make synth; "
              "needs the fpga extras)", "FPGA"),
    "fuzz": ("trainingcxl.fuzz.job", "fuzz descriptors, CSR sequences or CXL.mem messages "
             "against the RTL, golden model as oracle (make fuzz)", "verification"),
    "faults": ("trainingcxl.faults.job", "media-fault campaign: random media errors in every "
               "phase, each one reported, committed state intact (make faults)", "verification"),
    "stress": ("trainingcxl.stress.job", "DCOH random stress with the caching host (make stress)",
               "verification"),
    "shade": ("trainingcxl.shade.cli", "SHADE study: importance-aware sample cache against LRU, "
              "LFU, random, Belady (make shade)", "architects"),
    "system": ("trainingcxl.system.cli", "system model: a training step of TrainingCXL against "
               "PMEM-based baselines, device time from RTL-fitted formulas (make system)",
               "architects"),
    "lookup-demo": ("trainingcxl.lookup_demo.job", "LOOKUP-only demo: near-data gather + "
                    "sum-pool against the golden model", "everyone"),
}


def usage() -> str:
    w = max(map(len, COMMANDS))
    lines = [__doc__.strip().splitlines()[2].strip(), "", "commands:"]
    for name, (_, text, who) in COMMANDS.items():
        lines.append(f"  {name:<{w}}  {text} [{who}]")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"trainingcxl: unknown command {cmd!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[cmd][0])
    old = sys.argv[0]
    sys.argv[0] = f"trainingcxl {cmd}"        # argparse's prog in the command's own --help
    try:
        rc = module.main(rest)
    except SystemExit as e:                  # argparse errors (2) and --help (0)
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv[0] = old
    return int(rc or 0)


