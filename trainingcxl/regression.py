"""``trainingcxl test``: the regression, as ``make test`` runs it.

    trainingcxl test [--jobs N] [--seed S] the whole suite, N pytest workers (default 2), seed S
                                           for the randomized tests (default: derived from the
                                           checked-out commit, printed; see commit_seed)
    trainingcxl test [pytest arguments]    a selection

The whole suite runs ``pytest tests -n N --dist loadfile`` (less ``tests/cosim/pmem_cpp``, the
C++ PMEM model's parity with the Python one, about 45 s on the cached device build: its own
target, ``make test-cpmem``) with a JUnit report in
build/test-results.xml (under the working directory) and a ledger of every cocotb simulator run
in build/cocotb-runs.jsonl, then requires (:mod:`trainingcxl.check_junit`) the report to hold at
least one passed cosim test *and* the results files of the simulator runs to show at least one
cocotb test executed and passed, so a broken import, a skip, an empty selection or a cosim tier
of pure-Python tests cannot pass. Exit status: pytest's, or 1 when a check fails.

The whole suite also starts the default device's Verilator builds (the one most cosim tests
share, then the training job's top with its own clock) in a low-priority background process,
so it uses the cores the workers leave idle instead of holding up the first test that needs it
(:func:`_start_prebuild`).

Test files are handed to the workers longest first (``--no-loadscope-reorder``; the order is
set by ``tests/conftest.py`` from the per-file times in :data:`MODULE_TIMES`), so the last files
to run are short ones and both workers finish close together. After a whole-suite run the
measured per-file times are written to build/module-times.json; copying that file over
:data:`MODULE_TIMES` refreshes the order (a stale or missing entry changes only the order).

The default seed changes with every commit, so randomized stimulus is not one fixed sequence
forever; the seed is printed first, and ``--seed S`` (``make test SEED=S``) reproduces a run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from trainingcxl import check_junit

JUNIT = Path("build/test-results.xml")
LEDGER = Path("build/cocotb-runs.jsonl")
FALLBACK_SEED = 1
# The build most of the cosim tier shares (about 40 s of elaboration and 70 s of make -j2 cold),
# then the one of the top that makes its own clock (the training job's default)
PREBUILD = ("from cosim import build as cb; from hw.config import DeviceConfig; "
            "print(cb.device_build(DeviceConfig()).build_dir); "
            "print(cb.device_build(DeviceConfig(), own_clock=True).build_dir)")
PREBUILD_LOG = Path("build/prebuild.log")
PREBUILD_NICE = 10
# seconds per test file of one measured `make test` (module_times): the order the workers get
# files in; a whole-suite run writes its own measurement to MEASURED_TIMES
MODULE_TIMES = Path(__file__).resolve().parents[1] / "tests" / "module_times.json"
MEASURED_TIMES = Path("build/module-times.json")


def commit_seed(where: Path | None = None) -> tuple[int, str]:
    """(seed, where it came from): the first 8 hex digits of ``git rev-parse HEAD`` in ``where``
    (default: this checkout) mod 10^6, else :data:`FALLBACK_SEED` outside a git checkout."""
    where = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return FALLBACK_SEED, "no git"
    sha = r.stdout.strip()
    if r.returncode != 0 or len(sha) < 8:
        return FALLBACK_SEED, "not a git checkout"
    return int(sha[:8], 16) % 1_000_000 or 1, f"commit {sha[:10]}"


def _start_prebuild() -> subprocess.Popen:
    """Start the default device's simulator builds (:data:`PREBUILD`: the top cocotb clocks,
    then the one that makes its own clock) at low priority beside the test workers. It only
    gets the cores when the workers leave them idle (a worker waiting for a build another
    holds), and a worker that needs a build before it is done waits on the build's lock, which
    frees its core for it. A failure here fails nothing by itself: the tests
    that need the build make it again and report the error (:data:`PREBUILD_LOG` keeps this
    attempt's output).

    It runs in a process group of its own (stopped with its make and compiler processes by one
    ``killpg``) but in this session: with the kernel's autogroup scheduling (Linux's default on
    desktops and in many containers), a new session is a scheduling group of its own, whose
    processes get a group's fair share of the CPU whatever their nice value; measured here, a
    niced busy loop in a new session took a whole core from two un-niced ones, and 8 % of one
    in the same session."""
    PREBUILD_LOG.parent.mkdir(parents=True, exist_ok=True)
    print(f"trainingcxl test: building the default device's simulator in the background "
          f"(nice {PREBUILD_NICE}; log {PREBUILD_LOG})", flush=True)
    with PREBUILD_LOG.open("w") as log:
        return subprocess.Popen([sys.executable, "-c", PREBUILD], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                process_group=0, preexec_fn=_niced)


def _niced() -> None:
    os.nice(PREBUILD_NICE)


def module_times(junit: Path) -> dict:
    """Seconds per test file (setup, call and teardown of its tests) in a pytest JUnit report,
    keyed like pytest node ids (``tests/unit/test_x.py``)."""
    import xml.etree.ElementTree as ET
    times: dict = {}
    for case in ET.parse(junit).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        times[path] = times.get(path, 0.0) + float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(times.items())}


def file_order(paths, times: dict) -> dict:
    """Rank of each test file, longest (by ``times``) first; a file without a time counts as
    the median one, and ties keep the given order."""
    known = sorted(times.values())
    median = known[len(known) // 2] if known else 0.0
    uniq = list(dict.fromkeys(paths))
    ranked = sorted(range(len(uniq)), key=lambda i: (-times.get(uniq[i], median), i))
    return {uniq[i]: rank for rank, i in enumerate(ranked)}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    jobs, seed = "2", None
    while argv[:1] in (["--jobs"], ["--seed"]) and len(argv) >= 2 and argv[1].isdigit():
        if argv[0] == "--jobs":
            jobs = argv[1]
        else:
            seed = int(argv[1])
        argv = argv[2:]
    if seed is None and "--seed" not in argv:
        seed, origin = commit_seed()
        print(f"trainingcxl test: seed {seed} (from {origin}; reproduce with --seed {seed})",
              flush=True)
    JUNIT.parent.mkdir(parents=True, exist_ok=True)
    LEDGER.unlink(missing_ok=True)
    env = {**os.environ, "TRAININGCXL_RUN_LEDGER": str(LEDGER.resolve())}
    prebuild = None if argv else _start_prebuild()
    try:
        rc = subprocess.call([sys.executable, "-m", "pytest",
                              *(argv or ["tests", "-n", jobs, "--dist", "loadfile",
                                         "--no-loadscope-reorder",
                                         "--ignore", "tests/cosim/pmem_cpp"]),
                              *(["--seed", str(seed)] if seed is not None else []),
                              f"--junitxml={JUNIT}"], env=env)
    finally:
        if prebuild is not None and prebuild.poll() is None:
            os.killpg(prebuild.pid, signal.SIGTERM)   # with its make and compiler processes
            prebuild.wait()
    if rc != 0 or argv:                      # a partial selection need not contain cosim tests
        return rc
    MEASURED_TIMES.write_text(json.dumps(module_times(JUNIT), indent=1) + "\n")
    return check_junit.main([str(JUNIT), "--require", "tests.cosim", "--runs", str(LEDGER)])
