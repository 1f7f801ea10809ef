"""``make bench``: every benchmark of the project, each printing a table and writing JSON under
build/bench/.

    trainingcxl bench [--quick] [--verilator] [--workers N | --scheduler ADDRESS]

``--verilator`` adds the Verilator-alone speed of the full device (``verilator_speed``: one
C++-only build per configuration and option set, several minutes each when cold), idle and
under the training job's load (a 4-batch `trainingcxl train` with one power failure recorded
cycle by cycle, then replayed from C++ with every output checked), and makes the
``cosim_speed`` section time such a replay in its own rounds, beside the co-simulation of the
main job, with the ratio of the two.

Each benchmark section is a task (:mod:`trainingcxl.cluster`): by default they run one after
the other in this process, printing as they go. With ``--workers N`` or ``--scheduler ADDRESS``
the sections whose figures are simulated cycle counts (:data:`CYCLE_SECTIONS`: exact, whatever
else the machine runs) run at the same time on a Dask cluster (docs/campaigns.md), each
capturing its output, which is printed in section order once all are done; then the sections
that time the simulators (:data:`TIMED_SECTIONS`: wall-clock speed) run in this process, one
after the other, with the cluster closed, so nothing else shares the machine while they
measure. Every section runs even when another fails; the exit status is the first failing
section's. Each section builds its own simulators (content-hashed cache, locked per build, so
two workers never build the same one twice).
"""
from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from trainingcxl import cluster

__all__ = ["BenchSection", "run_section", "main", "SECTIONS", "CYCLE_SECTIONS", "TIMED_SECTIONS"]

SECTIONS = ("gather_reduce", "dcoh", "training", "cosim_speed")
# figures are simulated cycles (exact under any load) / wall-clock speed (measured alone)
CYCLE_SECTIONS = ("gather_reduce", "dcoh", "training")
TIMED_SECTIONS = ("cosim_speed", "verilator_speed")


@dataclass(frozen=True)
class BenchSection:
    """One task: ``trainingcxl.bench.<name>.main(argv)``; ``capture``: return its printed
    output instead of printing it (on a cluster worker)."""
    name: str
    argv: tuple
    capture: bool = False


def run_section(section: BenchSection, *, progress=None) -> dict:
    """Run one benchmark section; returns ``{"name", "rc", "output"}`` (``output`` None when
    not captured). A captured section's output is what it printed, its simulators' output
    included (they write to the process's file descriptors, not to ``sys.stdout``), and its
    standard error, in the order written; on a worker that runs several tasks at once (a
    cluster joined with ``--scheduler`` whose workers have more than one thread) only what
    the section printed from Python is captured, so no section takes another's lines."""
    module = importlib.import_module(f"trainingcxl.bench.{section.name}")
    if not section.capture:
        return {"name": section.name, "rc": module.main(list(section.argv)), "output": None}
    capture = _fd_captured if _one_task_at_a_time() else _py_captured
    rc, output = capture(lambda: module.main(list(section.argv)))
    return {"name": section.name, "rc": rc, "output": output}


def _one_task_at_a_time() -> bool:
    """True outside a Dask worker and on a worker with one thread."""
    try:
        from distributed import get_worker
        return get_worker().state.nthreads == 1
    except (ImportError, ValueError):          # not on a worker
        return True


def _py_captured(call):
    """``(call(), what it printed to sys.stdout)``."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        result = call()
    return result, buf.getvalue()


def _fd_captured(call):
    """``(call(), what was written meanwhile)``: file descriptors 1 and 2, and ``sys.stdout``
    and ``sys.stderr`` on them, go into one temporary file while ``call`` runs."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with tempfile.TemporaryFile() as f:
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        try:
            for fd in saved:
                os.dup2(f.fileno(), fd)
            with open(1, "w", closefd=False, buffering=1) as out, redirect_stdout(out), \
                    redirect_stderr(out):
                result = call()
        finally:
            for fd, old in saved.items():
                os.dup2(old, fd)
                os.close(old)
        f.seek(0)
        return result, f.read().decode(errors="replace")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trainingcxl bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke sizes")
    ap.add_argument("--verilator", action="store_true",
                    help="also the Verilator-alone cycles/s of the full device (no testbench)")
    ap.add_argument("--out", type=Path, default=Path("build/bench"),
                    help="directory of the JSON reports")
    cluster.add_arguments(ap)
    args = ap.parse_args(argv)
    cluster.check_arguments(ap, args)
    out = args.out.resolve()           # workers may run elsewhere
    extra = ["--quick"] if args.quick else []

    def section(name, capture):
        if name == "verilator_speed":
            argv = ("--out", str(out), "--record", "4")
        else:
            argv = tuple(extra + ["--out", str(out / f"{name}.json")] +
                         (["--verilator"] if args.verilator and name == "cosim_speed" else []))
        return BenchSection(name, argv, capture)

    names = list(SECTIONS) + (["verilator_speed"] if args.verilator else [])
    assert set(names) <= set(CYCLE_SECTIONS) | set(TIMED_SECTIONS), names
    done = {}
    try:
        with cluster.executor_from_args(args) as ex:
            if isinstance(ex, cluster.SerialExecutor):
                for d in ex.map(run_section, [section(n, False) for n in names], desc="bench",
                                unit="section", progress=False):
                    done[d["name"]] = d
            else:
                cyc = [section(n, True) for n in names if n in CYCLE_SECTIONS]
                print(f"bench: {len(cyc)} sections of simulated cycle counts on "
                      f"{ex.description}; then {len(names) - len(cyc)} timed sections here, "
                      f"alone", flush=True)
                for d in ex.map(run_section, cyc, desc="bench", unit="section"):
                    done[d["name"]] = d
    except cluster.ClusterError as e:
        print(f"trainingcxl bench: {e}", file=sys.stderr)
        return 2
    for n in names:
        if n in done:
            if done[n]["output"] is not None:
                print(done[n]["output"], end="", flush=True)
        else:                                   # timed, after the cluster closed
            done[n] = run_section(section(n, False))
    done = [done[n] for n in names]
    failed = [d for d in done if d["rc"]]
    for d in failed:
        print(f"bench: section {d['name']} failed (exit {d['rc']})", file=sys.stderr)
    return failed[0]["rc"] if failed else 0
