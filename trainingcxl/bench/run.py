"""``make bench``: every benchmark of the project, each printing a table and writing JSON under
build/bench/.

    trainingcxl bench [--quick] [--verilator]

``--verilator`` adds the Verilator-alone speed of the full device (``verilator_speed``: one
C++-only build per configuration and option set, several minutes each when cold), idle and
under the training job's load (a 4-batch `trainingcxl train` with one power failure recorded
cycle by cycle, then replayed from C++ with every output checked).
"""
import argparse

from trainingcxl.bench import dcoh, gather_reduce, training


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trainingcxl bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke sizes")
    ap.add_argument("--verilator", action="store_true",
                    help="also the Verilator-alone cycles/s of the full device (no testbench)")
    args = ap.parse_args(argv)
    extra = ["--quick"] if args.quick else []
    rc = gather_reduce.main(extra)
    rc = rc or dcoh.main(extra)
    rc = rc or training.main(extra)
    if args.verilator and not rc:
        from trainingcxl.bench import verilator_speed
        rc = verilator_speed.main(["--record", "4"])
    return rc
