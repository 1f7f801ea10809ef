"""``trainingcxl test``: the regression, as ``make test`` runs it.

    trainingcxl test [pytest arguments]

Runs ``pytest tests -n 2 --dist loadfile`` (or the given arguments) with a JUnit report in build/test-results.xml,
then requires that report to hold at least one passed cosim test (``cosim.build check-junit``),
so a broken import, a skip or an empty selection cannot pass. Exit status: pytest's, or 1 when
the report check fails.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

JUNIT = Path("build/test-results.xml")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    JUNIT.parent.mkdir(parents=True, exist_ok=True)
    rc = subprocess.call([sys.executable, "-m", "pytest",
                          *(argv or ["tests", "-n", "2", "--dist", "loadfile"]),
                          f"--junitxml={JUNIT}"])
    if rc != 0 or argv:                      # a partial selection need not contain cosim tests
        return rc
    return subprocess.call([sys.executable, "-m", "cosim.build", "check-junit", str(JUNIT),
                            "--require", "tests.cosim"])


if __name__ == "__main__":
    sys.exit(main())
