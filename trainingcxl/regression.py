"""``trainingcxl test``: the regression, as ``make test`` runs it.

    trainingcxl test [--jobs N] [--seed S] the whole suite, N pytest workers (default 2), seed S
                                           for the randomized tests (default 1)
    trainingcxl test [pytest arguments]    a selection

The whole suite runs ``pytest tests -n N --dist loadfile`` (less ``tests/cosim/pmem_cpp``, the
C++ PMEM model's parity with the Python one: it needs a second full-device build of 4-5 min,
so it is its own target, ``make test-cpmem``) with a JUnit report in
build/test-results.xml (under the working directory), then requires that report to hold at
least one passed cosim test (:mod:`trainingcxl.check_junit`), so a broken import, a skip or an
empty selection cannot pass. Exit status: pytest's, or 1 when the report check fails.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainingcxl import check_junit

JUNIT = Path("build/test-results.xml")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    jobs, seed = "2", []
    while argv[:1] in (["--jobs"], ["--seed"]) and len(argv) >= 2 and argv[1].isdigit():
        if argv[0] == "--jobs":
            jobs = argv[1]
        else:
            seed = ["--seed", argv[1]]
        argv = argv[2:]
    JUNIT.parent.mkdir(parents=True, exist_ok=True)
    rc = subprocess.call([sys.executable, "-m", "pytest",
                          *(argv or ["tests", "-n", jobs, "--dist", "loadfile",
                                     "--ignore", "tests/cosim/pmem_cpp"]), *seed,
                          f"--junitxml={JUNIT}"])
    if rc != 0 or argv:                      # a partial selection need not contain cosim tests
        return rc
    return check_junit.main([str(JUNIT), "--require", "tests.cosim"])
