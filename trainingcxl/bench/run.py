"""``make bench``: every benchmark of the project, each printing a table and writing JSON under
build/bench/.

    trainingcxl bench [--quick]
"""
import argparse

from trainingcxl.bench import dcoh, gather_reduce, training


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trainingcxl bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke sizes")
    args = ap.parse_args(argv)
    extra = ["--quick"] if args.quick else []
    rc = gather_reduce.main(extra)
    rc = rc or dcoh.main(extra)
    return rc or training.main(extra)
