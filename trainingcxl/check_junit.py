"""``python -m trainingcxl.check_junit REPORT --require PREFIX``: the guard after ``make test``.

Exits 1 unless the pytest JUnit report holds at least one passed test case whose classname
starts with ``PREFIX`` (``tests.cosim``), so a run where the cosim tier was skipped, deselected
or not collected cannot land green. The counting is :func:`cosim.build.check_junit`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosim.build import check_junit

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.check_junit",
                                 description="fail unless tests of a tier passed")
    ap.add_argument("report", type=Path, help="pytest --junitxml report")
    ap.add_argument("--require", required=True, help="classname prefix, e.g. tests.cosim")
    args = ap.parse_args(argv)
    n = check_junit(args.report, args.require)
    if n == 0:
        print(f"check-junit: no passed test under {args.require} in {args.report}",
              file=sys.stderr)
        return 1
    print(f"check-junit: {n} passed tests under {args.require}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
