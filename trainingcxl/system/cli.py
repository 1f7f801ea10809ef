"""``trainingcxl system`` / ``python -m trainingcxl.system``: the system-model report.

    python -m trainingcxl.system [--workload FILE ...] [--out build/system]
                                 [--clock fpga|fpga-target|asic] [--validate]

Without ``--workload`` the comparison's built-in workloads run (criteo-tb, rmc1, rmc2, rmc3);
each ``--workload`` (TOML or JSON, docs/system.md) replaces them. ``--validate`` only prints
the cycle formulas against the held-out RTL measurements and exits 1 if any is off by more
than 5 %.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

__all__ = ["add_parser", "main", "build_parser"]

TOLERANCE = 0.05


def _configure(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from trainingcxl.system.params import CLOCKS
    from trainingcxl.system.workload import BUILTIN

    ap.add_argument("--workload", action="append", type=pathlib.Path, default=None,
                    metavar="FILE", help="workload description (.toml or .json); repeatable")
    ap.add_argument("--builtin", action="append", choices=sorted(BUILTIN), default=None,
                    help="a built-in workload (default: all of them)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/system"),
                    help="output directory (default build/system)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="asic",
                    help="device clock for the detailed sections (default asic); the headline "
                         "table shows fpga and asic too")
    ap.add_argument("--validate", action="store_true",
                    help="only check the cycle formulas against the held-out RTL runs")
    ap.set_defaults(func=run)
    return ap


def build_parser() -> argparse.ArgumentParser:
    return _configure(argparse.ArgumentParser(prog="python -m trainingcxl.system",
                                              description=__doc__.splitlines()[0]))


def add_parser(subparsers):
    """Register ``system`` on an argparse subparsers object (``trainingcxl system``)."""
    return _configure(subparsers.add_parser("system", help="system model: speed and energy "
                                            "against PMEM-based baselines",
                                            description=__doc__.splitlines()[0]))


def run(args) -> int:
    from trainingcxl.system import cycles, report
    from trainingcxl.system.workload import WorkloadError, builtin, load

    if args.validate:
        rows = cycles.validate()
        print(report.validation_table(rows))
        worst = max(abs(r["error"]) for r in rows)
        print(f"worst |error| on held-out RTL runs: {worst:.1%} (tolerance {TOLERANCE:.0%})")
        return 0 if worst <= TOLERANCE else 1
    try:
        if args.workload:
            workloads = [load(p) for p in args.workload]
        else:
            workloads = [builtin(n) for n in (args.builtin or
                                              ["criteo-tb", "rmc1", "rmc2", "rmc3"])]
    except WorkloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    clocks = tuple(dict.fromkeys(["fpga", "asic", args.clock]))
    s = report.write_report(workloads, args.out, clocks=clocks, primary=args.clock)
    print(f"{'clock':>12} {'workload':>12} {'speedup vs pmem-log':>20} {'energy saving':>14}")
    for c, by_w in s["comparison"].items():
        for wn, d in by_w.items():
            print(f"{c:>12} {wn:>12} {d['speedup']['pmem-log']:>19.2f}x "
                  f"{d['energy_saving']['pmem-log']:>13.0%}")
    print("paper: 5.2x, 76 %")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
