"""``python -m trainingcxl.check_junit REPORT --require PREFIX [--runs LEDGER]``: the guard after
``make test``.

Exits 1 unless the pytest JUnit report holds at least one passed test case whose classname
starts with ``PREFIX`` (``tests.cosim``) and, with ``--runs``, unless the cocotb results files
named in the run ledger (``cosim.build.RUN_LEDGER_ENV``: one line per simulator run, written by
``cosim.build.run``) show at least one cocotb test executed and passed. The second count is of
simulator runs, not pytest nodes: a pure-Python test under tests/cosim cannot satisfy it, and
each results file is read again here (``cosim.build.count_results``), so a file that is missing
or lists only skipped tests counts nothing. The JUnit counting is :func:`cosim.build.check_junit`.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from cosim.build import check_junit, count_results

__all__ = ["main", "check_runs"]


def check_runs(ledger: Path) -> tuple[int, int, Counter, list]:
    """(simulator runs, cocotb tests executed and passed, passed per module, problems) from the
    run ledger, every results file re-read. Runs with failures count nothing (tests that make a
    cocotb test fail on purpose write them too; pytest reports unexpected failures itself)."""
    runs, passed, per_module, problems = 0, 0, Counter(), []
    if not ledger.is_file():
        return 0, 0, per_module, [f"no run ledger at {ledger}"]
    for line in ledger.read_text().splitlines():
        if not line.strip():
            continue
        ent = json.loads(line)
        runs += 1
        if not Path(ent["results_xml"]).parent.parent.exists():
            # run in a test's temporary directory, removed since: nothing to re-read, and not
            # a failure (pytest reported the test itself); it counts nothing
            problems.append(f"{ent['module']}: results gone with their temporary directory")
            continue
        try:
            n_tests, n_failed, n_skipped = count_results(Path(ent["results_xml"]))
        except (RuntimeError, OSError) as e:
            problems.append(f"{ent['results_xml']}: {e}")
            continue
        if n_failed == 0:
            passed += n_tests - n_skipped
            per_module[ent["module"]] += n_tests - n_skipped
    return runs, passed, per_module, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.check_junit",
                                 description="fail unless tests of a tier passed")
    ap.add_argument("report", type=Path, help="pytest --junitxml report")
    ap.add_argument("--require", required=True, help="classname prefix, e.g. tests.cosim")
    ap.add_argument("--runs", type=Path, default=None,
                    help="run ledger of the cocotb simulator runs (TRAININGCXL_RUN_LEDGER)")
    args = ap.parse_args(argv)
    n = check_junit(args.report, args.require)
    if n == 0:
        print(f"check-junit: no passed test under {args.require} in {args.report}",
              file=sys.stderr)
        return 1
    print(f"check-junit: {n} passed tests under {args.require}")
    if args.runs is not None:
        runs, passed, per_module, problems = check_runs(args.runs)
        gone = [p for p in problems if p.endswith("temporary directory")]
        if gone:
            print(f"check-junit: {len(gone)} simulator runs not re-read (results removed with "
                  f"their temporary directories): "
                  f"{', '.join(sorted({p.split(':')[0] for p in gone}))}")
        for p in [p for p in problems if p not in gone][:5]:
            print(f"check-junit: unreadable results: {p}", file=sys.stderr)
        if passed == 0:
            print(f"check-junit: no cocotb test executed and passed in the {runs} simulator "
                  f"runs of {args.runs}", file=sys.stderr)
            return 1
        print(f"check-junit: {passed} cocotb tests executed and passed in {runs} simulator runs "
              f"({len(per_module)} test modules; results files re-read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
