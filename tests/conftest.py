"""Shared pytest options: ``--seed`` (the seed of randomized tests; default derived from the
checked-out commit, ``trainingcxl.regression.commit_seed``, so stimulus changes across commits
and the header prints how to reproduce it), ``--waves`` (sets
``WAVES=1``) and ``--require-icarus`` (the Icarus cross-check fails instead of skipping when
``iverilog`` is missing; ``make test-icarus``).

Test files are collected longest first (times in tests/module_times.json, see
``trainingcxl.regression``), so ``--dist loadfile`` workers end with short files."""
import json
import os

import pytest

from trainingcxl.regression import MODULE_TIMES, commit_seed, file_order

DEFAULT_SEED, SEED_ORIGIN = commit_seed(os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None,
                     help=f"seed for randomized tests (default {DEFAULT_SEED}, from "
                          f"{SEED_ORIGIN})")
    parser.addoption("--waves", action="store_true",
                     help="build simulators with tracing and write dump.vcd (same as WAVES=1)")
    parser.addoption("--require-icarus", action="store_true",
                     help="fail, rather than skip, the Icarus cross-check when iverilog is missing")


def _seed(config) -> int:
    s = config.getoption("--seed")
    return DEFAULT_SEED if s is None else s


@pytest.hookimpl(trylast=True)        # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items):
    times = json.loads(MODULE_TIMES.read_text()) if MODULE_TIMES.is_file() else {}
    rank = file_order([item.nodeid.split("::")[0] for item in items], times)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])   # stable: file order kept


def pytest_configure(config):
    if config.getoption("--waves"):
        os.environ["WAVES"] = "1"


def pytest_report_header(config):
    waves = " waves=on" if os.environ.get("WAVES") == "1" else ""
    origin = "given" if config.getoption("--seed") is not None else f"from {SEED_ORIGIN}"
    return f"trainingcxl: seed={_seed(config)} ({origin}; --seed N to reproduce){waves}"


@pytest.fixture
def seed(request) -> int:
    """The run's seed; printed so a failing test's report shows how to reproduce it."""
    s = _seed(request.config)
    print(f"seed={s} (rerun with --seed {s})")
    return s


def pytest_terminal_summary(terminalreporter):
    """Print how many cocotb tests really executed (each run already checked its results file)."""
    from cosim import build as cb
    if cb.RUNS:
        n = sum(k for _, k in cb.RUNS)
        mods = sorted({m for m, _ in cb.RUNS})
        terminalreporter.write_line(
            f"cocotb: {n} cocotb tests passed in {len(cb.RUNS)} simulator runs ({', '.join(mods)})")
