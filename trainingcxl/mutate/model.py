"""Mutation testing of the golden model (issue #17 item 3, docs/verification.md "Mutation testing:
sw_model"): a wrong ``sw_model`` must be caught by the model tests.

    python -m trainingcxl.mutate.model --sample 500 --seed 1 --workers 2

mutmut (pinned in pyproject.toml) generates every mutant of every function and method of the
package (operators, comparisons, constants, strings, keyword arguments, ``None`` for arguments
and assignments; module-level constants and class bodies are not mutated). This runner stages a
copy of the package and the tests in ``<out>/work`` (mutmut rewrites the package under
``work/mutants`` and runs pytest from there, so the checkout is never modified), draws a sample
of the mutants from ``random.Random(seed)`` (the whole set without ``--sample``) and has mutmut
run them: one forked process per mutant (``--workers`` at a time), each running only the tests
that called the mutated function during mutmut's stats run, stopping at the first failure, with
a wall-clock limit of ``(those tests' time + TIMEOUT_CONSTANT_S) * TIMEOUT_MULTIPLIER`` (a
mutant that hangs is stopped there and counted as ``timeout``). The tests run with
``--seed <seed>``, so their stimulus is reproducible too.

Verdicts, per file and in total: ``killed`` (a test failed), ``timeout``, ``survived`` (every
selected test passed), ``no tests`` (no model test calls the function: nothing can kill it),
``equivalent`` (a survivor reviewed and listed in :data:`EQUIVALENT` with the reason), ``other``
(mutmut's "suspicious"/"segfault": the test process died some other way), ``not run``
(``--time-limit`` stopped mutmut before it). The score is
``(killed + timeout) / (mutants - equivalent - not run)``. The table goes to stdout; ``<out>/model.json``
lists every mutant that was not killed with its file, line and diff.

The Dask helpers of :mod:`trainingcxl.cluster` are not used: mutmut's speed comes from forking
one process that has already imported the package and collected the tests, and that process
has to be on the machine that runs the mutants; its local fork pool is the process pool here.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from contextlib import chdir
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "build" / "mutate"

#: wall-clock limit per mutant: (duration of its tests in the stats run + constant) * multiplier.
#: mutmut's duration counts only the test calls, not fixture setup (test_embedding_device's
#: module fixture alone takes 11 s), and the machine is shared (load 2-8 on 2 cores): with 10 s
#: and 6x, the first measured run stopped 12 mutants that were not hanging (docs/verification.md).
#: A false timeout counts as a kill, so the limit is generous; a real hang costs up to
#: (tests + 60 s) * 10.
TIMEOUT_MULTIPLIER = 10.0
TIMEOUT_CONSTANT_S = 60.0

#: mutmut exit codes (``mutmut.stats.status_by_exit_code``) -> verdict of this report.
VERDICTS = ("killed", "timeout", "survived", "no tests", "equivalent", "other", "not run")

#: Surviving mutants reviewed and found equivalent or not killable by any test of the model's
#: behaviour: mutant name -> (a fragment of the mutated line, reason). The fragment guards
#: against a renumbering after a source change: a listed survivor whose diff no longer contains
#: it is reported as ``survived``, not ``equivalent``. docs/verification.md explains each.
MESSAGE_ONLY = "error message text only: the same exception type is raised at the same point"
DIAGNOSTIC_ONLY = ("hexdump text of a mismatch report only (which rows are printed, the marker "
                   "line): the reported addresses and the pass/fail verdict are unchanged")
VIOLATION_TEXT_ONLY = ("text of a coherence violation's message only: the rule, line, agent and "
                       "cycles reported and the verdict are unchanged")
JOURNAL = ("`journal` only decides whether a write keeps the bytes it replaced in `last`, which "
           "_on_write reads only at the write a scheduled failure hits, and "
           "schedule_power_failure turns it on: an extra read per write, nothing else")
EQUIVALENT: dict[str, tuple[str, str]] = {
    "sw_model.clicklog.x_criteo_lines_to_clicklog__mutmut_2":
        ('"XX<lines>XX"', "default of `source`, which only names the input in error messages"),
    "sw_model.clicklog.x_criteo_lines_to_clicklog__mutmut_159":
        ("np.asarray(x, dtype=None)", "bag_idx holds lists of Python ints, which numpy makes "
                                      "int64 unasked"),
    "sw_model.clicklog.xǁClickDataǁvalidate__mutmut_10":
        ('"XXiuXX"', "`kind not in \"XXiuXX\"` is a substring test: 'i' and 'u' are still in "
                     "it and no numpy dtype kind is 'X'"),
    "sw_model.clicklog.xǁClickDataǁvalidate__mutmut_118":
        ('"XXiuXX"', "`kind not in \"XXiuXX\"` is a substring test: 'i' and 'u' are still in "
                     "it and no numpy dtype kind is 'X'"),
    "sw_model.clicklog.xǁClickDataǁvalidate__mutmut_88": ("getattr(None, 'shape', '')", MESSAGE_ONLY),
    "sw_model.clicklog.xǁClickDataǁvalidate__mutmut_132": ("bad(None)", MESSAGE_ONLY),
    "sw_model.embedding_device.xǁFloatEmbeddingsǁrestart__mutmut_3":
        ('"floatembeddings has', MESSAGE_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁ_describe__mutmut_30": ("o + 17", DIAGNOSTIC_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁ_describe__mutmut_69": ('"XX  XX"', DIAGNOSTIC_ONLY),
    "sw_model.clicklog.xǁClickDataǁconcat__mutmut_2": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.dlrm.x_auc__mutmut_18": ('"XXlabels must be 0 or 1XX"', MESSAGE_ONLY),
    "sw_model.embedding_device.xǁFloatEmbeddingsǁlookup__mutmut_3":
        ("self._check_batch(batch, None)", MESSAGE_ONLY + " (the argument names the operation "
                                                          "in _check_batch's message)"),
    "sw_model.embedding_device.xǁFloatEmbeddingsǁupdate__mutmut_22":
        ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.embedding_device.x_lr_to_fixed__mutmut_23":
        ("- 1) * (1 << frac_bits)", MESSAGE_ONLY + " (the largest representable rate it quotes)"),
    "sw_model.embedding_device.xǁModelDeviceǁschedule_power_failure__mutmut_4":
        ('"XXafter_writes must be >= 0XX"', MESSAGE_ONLY),
    "sw_model.embedding_device.xǁModelDeviceǁ_power_on__mutmut_17":
        ("self.dead = None", "`dead` is only ever tested for truth (`if self.dead:`)"),
    "sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_114":
        ("max(int(nbytes), 2)", "every region starts 64 B aligned, so _align(addr + 1) and "
                                "_align(addr + 2) are the same next line"),
    "sw_model.dlrm.x_pool_float__mutmut_8":
        ("o = np.asarray(o, dtype=None)", "bag offsets are non-decreasing integers: np.diff, "
                                          "np.repeat and the slice give the same in any integer "
                                          "dtype (a list becomes int64 anyway)"),
    "sw_model.embedding_device.x_lr_to_fixed__mutmut_24":
        ("((1 << 32) + 1) / (1 << frac_bits)", MESSAGE_ONLY),
    "sw_model.embedding_device.xǁModelDeviceǁschedule_power_failure__mutmut_3":
        ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.coherence.x_host_region__mutmut_2":
        ("cfg.addr_bits + 6", "the early return is a shortcut: DeviceConfig keeps every region "
                              "below 2^addr_bits, so region_of(addr << 6) is None for any line "
                              "address with a bit at or above addr_bits - 6 anyway"),
    "sw_model.coherence.xǁLineValueCheckerǁ__init____mutmut_35":
        ("self._next_handle = 1", "write handles are opaque keys handed out by write_begin and "
                                  "given back to write_end: the first one's number does not matter"),
    "sw_model.coherence.xǁLineValueCheckerǁ_line__mutmut_12": ("ValueError(None)", MESSAGE_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁread__mutmut_18": ('"XXreadXX"', MESSAGE_ONLY),
    "sw_model.memory.xǁMemoryImageǁdiff__mutmut_71": ("o + 17", DIAGNOSTIC_ONLY),
    "sw_model.memory.xǁMemoryImageǁdiff__mutmut_75": ('"XX  XX"', DIAGNOSTIC_ONLY),
    "sw_model.memory.xǁMemoryImageǁdiff__mutmut_84": ('"XX\\nXX"', DIAGNOSTIC_ONLY),
    "sw_model.expected_trace.x_expected_events__mutmut_34": ("a.get('_line', )", MESSAGE_ONLY),
    "sw_model.expected_trace.x_expected_events__mutmut_36": ("a.get('_LINE', '?')", MESSAGE_ONLY),
    "sw_model.workload.x_make_bags__mutmut_13":
        ("np.full(n_bags, pooling, )", "pooling is an int: np.full makes int64 unasked"),
    "sw_model.workload.xǁLookupJobǁlayout__mutmut_61":
        ("poison, dtype=None)", "poison is an int, so np.full makes int64 unasked, and write_i32 "
                                "stores the same 32-bit values either way"),
    # reviewed in the second campaign (seed-1 sample of 500 of 8,860 mutants)
    "sw_model.coherence.xǁHostPermissionǁdevice_access__mutmut_43":
        ('"XXBISnpCur completed since the grantXX"', VIOLATION_TEXT_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁread__mutmut_42": ("or 'NONE'", VIOLATION_TEXT_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁread__mutmut_56":
        ('self._data(data, "READ")', MESSAGE_ONLY + " (the argument only names the operation in "
                                                    "_data's message)"),
    "sw_model.embedding_device.x__bags_u32__mutmut_17":
        ('"XXiuXX"', "`kind not in \"XXiuXX\"` is a substring test: 'i' and 'u' are still in "
                     "it and no numpy dtype kind is 'X'"),
    "sw_model.embedding_device.x__bags_u32__mutmut_33": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.embedding_device.xǁFixedPointEmbeddingsǁcommit_q__mutmut_2":
        ("tag=self._next_tag())], None)", "the label only prefixes the messages of _run's "
                                           "exceptions (same exception, same point)"),
    "sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_28":
        ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.expected_trace.xǁ_Replayǁload__mutmut_13": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.memory.x__int_array__mutmut_15": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.memory.xǁMemoryImageǁ_check__mutmut_9": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.coherence.xǁLineValueCheckerǁadvance__mutmut_1":
        ("if horizon >= self.horizon:", "at equality the assignment sets the horizon to the "
                                        "value it already has"),
    "sw_model.coherence.xǁLineValueCheckerǁ_prune__mutmut_45":
        ("covered = u.mask", "that branch runs only when writes newer than the pruned ones "
                             "cover all 64 bytes; those are kept and ended before the horizon, "
                             "so every later read's walk (and candidates') counts all bytes as "
                             "written before it consults `covered`: the initial value is never "
                             "possible again, whatever `covered` holds"),
    "sw_model.device.xǁDeviceModelǁ_pool__mutmut_64":
        ("st[i] - max_rows", "only the chunking of the bags changes (one bag per chunk): each "
                             "bag's sum is the same reduceat over its own rows"),
    "sw_model.dlrm.x_bce_with_logits__mutmut_10":
        ("y = np.asarray(labels, )", "y meets only the float64 logits (z * y): numpy promotes "
                                     "any integer or float label array to float64 with the "
                                     "same exact conversion the cast made"),
    "sw_model.dlrm.x_pool_float__mutmut_10":
        ("o = np.asarray(o, )", "bag offsets are non-decreasing integers: np.diff, np.repeat "
                                "and the slice give the same in any integer dtype (a list "
                                "becomes int64 anyway)"),
    "sw_model.embedding_device.xǁFixedPointEmbeddingsǁ__init____mutmut_8":
        ("self._snap_buf = 1", "which of the two staging snapshot buffers the first snapshot "
                               "uses: the SNAPSHOT descriptor names the buffer the blob was "
                               "written to, so the device copies the same bytes; the "
                               "alternation after it is unchanged"),
    "sw_model.embedding_device.xǁFloatEmbeddingsǁlookup__mutmut_46":
        ("tab.shape[1]), dtype=None)", "np.zeros makes float64 when no dtype is given"),
    "sw_model.embedding_device.xǁModelDeviceǁ_on_write__mutmut_36":
        ("self.mem.journal = None", JOURNAL),
    "sw_model.embedding_device.xǁModelDeviceǁ_on_write__mutmut_37":
        ("self.mem.journal = True", JOURNAL),
    "sw_model.embedding_device.xǁModelDeviceǁcancel_power_failure__mutmut_3":
        ("self.mem.journal = True", JOURNAL),
    "sw_model.expected_trace.xǁ_RecMemǁwrite__mutmut_5":
        ("super().write(address, data, )", "MemoryImage.write accepts keyword arguments only "
                                           "for signature compatibility and ignores them"),
    "sw_model.expected_trace.xǁ_Replayǁ_cxl__mutmut_85":
        ("(ans.ndr is None) and False", "every answer to an RwD carries an NDR (Cmp, or "
                                        "BIConflictAck; every row of the write table has one), "
                                        "so the `[]` branch is never taken"),
    "sw_model.expected_trace.xǁ_Replayǁ_media_write__mutmut_23":
        ("bytes(LINE + o - k)", "the padding after the written bytes only makes the buffer "
                                "longer than 64 B: LineOverlay.write reads bytes 0..63 where "
                                "the byte enables (unchanged) are set"),
    "sw_model.expected_trace.xǁ_Replayǁ_step__mutmut_25":
        ("self._cpl_write = None", "`_cpl_write` is only ever tested for truth"),
    "sw_model.fixedpoint.x_pool_exact__mutmut_10":
        ("rows.astype(None)", "int32 values are exact in float64 and sum(dtype=int64) "
                              "accumulates each element converted to int64"),
    "sw_model.fixedpoint.x_saturate32__mutmut_3":
        ("np.asarray(acc, dtype=None)", "for integer input (the one caller passes int64 sums; "
                                        "Python ints become int64 anyway) clip, compare and the "
                                        "int32 cast give the same values and count"),
    "sw_model.memory.xǁMemoryImageǁline_arrays__mutmut_24":
        ("np.argsort(addrs, )", "the addresses are dict keys, all distinct: every sort gives "
                                "the same order"),
    "sw_model.memory.xǁMemoryImageǁwrite_i32__mutmut_28":
        ('copy=None', "whether astype copies does not change the bytes written"),
    # third campaign (2026-12-07)
    "sw_model.embedding_device.xǁModelDeviceǁsubmit__mutmut_5": ("raise ValueError(None)",
                                                                MESSAGE_ONLY),
    "sw_model.expected_trace.x_expected_events__mutmut_46": ("'XX?XX'", MESSAGE_ONLY),
    "sw_model.training.x_snap_slot_addr__mutmut_4": ("raise ValueError(None)", MESSAGE_ONLY),
    "sw_model.training.xǁTrainingDeviceǁexecute__mutmut_4": ('"EXECUTE BEFORE RECOVER()"',
                                                            MESSAGE_ONLY),
    "sw_model.expected_trace.xǁ_RecMemǁ__init____mutmut_4":
        ("self.backdoor = None", "`backdoor` is only ever tested for truth"),
    "sw_model.expected_trace.xǁ_Replayǁload__mutmut_37":
        ("self.mem.backdoor = None", "`backdoor` is only ever tested for truth"),
    "sw_model.memory.x_differing_lines__mutmut_6":
        ("np.full(LINE, a.fill, dtype=None)", "an image's fill is a byte value (MemoryImage "
                                              "refuses others, LineSnapshot.of copies it): "
                                              "uint8 rows compared with it as int64 give the "
                                              "same booleans"),
}


class MutateError(Exception):
    """A campaign that cannot run: bad arguments, mutmut failing before any mutant ran."""


@dataclass
class Target:
    """What to mutate and what should kill it.

    ``project``: the checkout; ``package``: the directory of the package to mutate (relative);
    ``tests``: pytest paths (relative) whose tests are the killers; ``support``: files or
    folders the tests need besides ``tests`` (copied into the staged tree: the conftest, and
    the rest of ``tests/`` that a layout test lists); ``link``:
    top-level entries of the project the tests read through paths relative to the checkout
    (linked into mutmut's working copy); ``seed_option``: the pytest option that seeds the
    tests (given the campaign's seed), None if they take none; ``leave_out``: pytest node ids
    or files that are not run (``--deselect``/``--ignore``), each with the reason."""
    project: Path
    package: str
    tests: list[str]
    support: list[str] = field(default_factory=list)
    link: list[str] = field(default_factory=list)
    seed_option: str | None = None
    leave_out: dict[str, str] = field(default_factory=dict)


#: model tests not run against the mutants, with the reason
SW_MODEL_LEFT_OUT = {
    "tests/model/test_cluster.py":
        "tests trainingcxl.cluster (Dask); its worker processes import the unmutated package",
}


def sw_model_target(project: Path = ROOT) -> Target:
    """The golden model and its tests (``tests/model``)."""
    skip = {"sw_model", "tests", "build", ".venv", ".git", "pyproject.toml"}
    # dot entries (.git, .hypothesis's example database, caches) stay out: the tests' own state
    # goes into the working copy
    link = sorted(p.name for p in project.iterdir() if p.name not in skip
                  and not p.name.startswith(".") and not p.name.endswith(".egg-info"))
    return Target(project=project, package="sw_model", tests=["tests/model"],
                  support=["tests"], link=link, seed_option="--seed", leave_out=SW_MODEL_LEFT_OUT)


# ----------------------------------------------------------------------------------------------
# Enumerating the mutants


def _generate(rel: str) -> str | None:
    from mutmut.__main__ import create_file_mutants
    result = create_file_mutants(Path(rel))
    return None if result.error is None else f"{rel}: {result.error!r}"


def list_mutants(work: Path, package: str, workers: int = 1) -> dict[str, str]:
    """Generate every mutant of the staged package in ``work`` with mutmut's own generation step
    (``work/mutants/<file>`` with its ``.meta``; ``mutmut run`` then finds them up to date and
    does not generate them again): mutant name -> source file (relative)."""
    from multiprocessing import get_context

    from mutmut.configuration import reset_config

    files = [str(p) for p in sorted(Path(work, package).rglob("*.py"))]
    files = [str(Path(f).relative_to(work)) for f in files]
    out: dict[str, str] = {}
    with chdir(work):
        reset_config()  # mutmut reads pyproject.toml of the current directory once
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    get_context("fork").Pool(processes=workers) as pool:
                errors = [e for e in pool.map(_generate, files) if e is not None]
        finally:
            reset_config()
    if errors:
        raise MutateError("mutmut could not mutate " + "; ".join(errors))
    for rel in files:
        meta = json.loads((work / "mutants" / (rel + ".meta")).read_text())
        out.update({name: rel for name in meta["exit_code_by_key"]})
    return out


def draw_sample(names: list[str], sample: int | None, seed: int) -> list[str]:
    """``sample`` mutant names drawn with ``random.Random(seed)`` from the sorted set (all of
    them if ``sample`` is None or not smaller), sorted: the same seed gives the same sample."""
    ordered = sorted(names)
    if sample is None or sample >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, sample))


# ----------------------------------------------------------------------------------------------
# Staging and running mutmut


def _toml_value(v) -> str:
    # the values written are strings, numbers, booleans and lists of strings: JSON spells those
    # the way TOML does
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def stage(target: Target, work: Path, seed: int) -> None:
    """A fresh working directory for mutmut: the package and the tests copied, a pyproject.toml
    with mutmut's configuration and the project's pytest options, and mutmut's working copy
    ``mutants/`` pre-populated with links to the rest of the checkout."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(target.project / target.package, work / target.package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the runner's own tests (test_mutate_*.py) stay out: a campaign inside every mutant's run
    skip = shutil.ignore_patterns("__pycache__", "sim_build", "*.vcd", "test_mutate_*.py")
    for rel in target.tests + target.support:
        src = target.project / rel
        if src.is_dir():
            shutil.copytree(src, work / rel, dirs_exist_ok=True, ignore=skip)
        else:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / rel)
    pytest_opts = {}
    pyproject = target.project / "pyproject.toml"
    if pyproject.exists():
        pytest_opts = tomllib.loads(pyproject.read_text()).get("tool", {}).get("pytest", {}) \
            .get("ini_options", {})
    mutmut = {
        "source_paths": [target.package],
        "pytest_add_cli_args_test_selection": target.tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider"]
        + ([target.seed_option, str(seed)] if target.seed_option else [])
        + [f"--deselect={t}" if "::" in t else f"--ignore={t}" for t in target.leave_out],
        "timeout_multiplier": TIMEOUT_MULTIPLIER,
        "timeout_constant": TIMEOUT_CONSTANT_S,
        "use_git_change_detection": False,
        "debug": False,
    }
    lines = ["[tool.mutmut]"] + [f"{k} = {_toml_value(v)}" for k, v in mutmut.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    for key in ("filterwarnings", "markers"):
        if key in pytest_opts:
            lines.append(f"{key} = {_toml_value(pytest_opts[key])}")
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (work / "mutants").mkdir()
    for name in target.link:
        (work / "mutants" / name).symlink_to(target.project / name)


def _read_exit_codes(work: Path, files: set[str]) -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for rel in files:
        meta = work / "mutants" / (rel + ".meta")
        try:
            codes.update(json.loads(meta.read_text())["exit_code_by_key"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass  # not written yet, or being rewritten: the next poll reads it
    return codes


def run_mutmut(work: Path, names: list[str], files: set[str], workers: int, log: Path,
               progress: bool = True, time_limit_s: float | None = None) -> dict[str, int | None]:
    """``mutmut run --max-children workers <names>`` in ``work`` (output to ``log``), with a tqdm
    bar fed from mutmut's per-file result files; returns mutant name -> exit code (None: not
    run, because ``time_limit_s`` stopped mutmut first)."""
    from tqdm import tqdm

    mutmut = Path(sys.executable).with_name("mutmut")
    cmd = [str(mutmut) if mutmut.exists() else "mutmut", "run", "--max-children", str(workers),
           *names]
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    wanted = set(names)
    with open(log, "w") as out:
        # its own session, so the time limit can stop mutmut and its forked workers together
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        bar = tqdm(total=len(names), unit="mutant", desc="mutants", disable=not progress,
                   file=sys.stderr)
        done = 0
        t0 = time.monotonic()
        stopped = False
        # the results files start out with the state of the previous run of these mutants
        # (none: the work directory is fresh), so counting non-null codes counts this run
        while proc.poll() is None:
            time.sleep(2.0)
            codes = _read_exit_codes(work, files)
            now = sum(1 for n in wanted if codes.get(n) is not None)
            if now > done:
                bar.update(now - done)
                done = now
            if time_limit_s is not None and not stopped and time.monotonic() - t0 > time_limit_s:
                # mutmut ignores SIGINT here (the first time-limited run went on for 9 minutes
                # after it): stop its whole session, workers included; the verdicts it has
                # written stay in its result files
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                stopped = True
        bar.close()
    codes = _read_exit_codes(work, files)
    if proc.returncode != 0 and not stopped:
        tail = log.read_text().splitlines()[-30:]
        raise MutateError(f"mutmut exited with {proc.returncode} (log {log}):\n" + "\n".join(tail))
    return {n: codes.get(n) for n in names}


# ----------------------------------------------------------------------------------------------
# Verdicts and report


def verdict(exit_code: int | None) -> str:
    from mutmut.stats import status_by_exit_code
    status = status_by_exit_code[exit_code]
    if status in ("killed", "timeout", "survived", "no tests"):
        return status
    if status == "not checked":
        return "not run"
    return "other"


def mutant_diff(work: Path, name: str, rel: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    with chdir(work):
        return get_diff_for_mutant(name, path=rel)


def mutant_line(source: str, name: str, diff: str) -> int | None:
    """Line of the mutation in the original source: the first removed line of the function
    diff, searched inside the mutated function's lines."""
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key
    func, cls = orig_function_and_class_names_from_key(name)
    tree = ast.parse(source)
    span = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and cls is not None and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == func:
                    span = (item.lineno, item.end_lineno)
        elif cls is None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name == func and node in tree.body:
            span = (node.lineno, node.end_lineno)
    removed = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    if span is None or not removed:
        return None
    lines = source.splitlines()
    for i in range(span[0] - 1, span[1]):
        if lines[i].strip() == removed[0]:
            return i + 1
    for i in range(span[0] - 1, span[1]):  # a statement split over lines: match its start
        if lines[i].strip() and removed[0].startswith(lines[i].strip()):
            return i + 1
    return span[0]


def summarise(verdicts: dict[str, str], file_of: dict[str, str]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for name, v in verdicts.items():
        row = table.setdefault(file_of[name], {k: 0 for k in VERDICTS})
        row[v] += 1
    total = {k: sum(r[k] for r in table.values()) for k in VERDICTS}
    return {**dict(sorted(table.items())), "total": total}


def score(row: dict[str, int], timeouts_kill: bool = True) -> float | None:
    """(killed + timeout) / (mutants - equivalent - not run); without ``timeouts_kill`` only
    the mutants a failing test killed count as killed."""
    counted = sum(row.values()) - row["equivalent"] - row["not run"]
    killed = row["killed"] + (row["timeout"] if timeouts_kill else 0)
    return None if counted == 0 else killed / counted


def format_table(table: dict[str, dict[str, int]]) -> str:
    head = ["file", "mutants", *VERDICTS, "score"]
    rows = []
    for f, r in table.items():
        s = score(r)
        rows.append([f, str(sum(r.values())), *(str(r[k]) for k in VERDICTS),
                     "-" if s is None else f"{100 * s:.1f} %"])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def judge(target: Target, work: Path, file_of: dict[str, str], codes: dict[str, int | None],
          equivalent: dict[str, tuple[str, str]]) -> dict:
    """The report of a finished run in ``work``: verdict per mutant (``codes``: mutmut's exit
    codes of the mutants run), table per file, every mutant not killed by a failing test (the
    survivors in ``not_killed``, the timeouts in ``timeouts``) with file, line and diff.

    A mutant reviewed as equivalent (``equivalent``) that survived or timed out is counted
    ``equivalent``: nothing can kill it, so a timeout of it was the time limit, not a hang."""
    verdicts: dict[str, str] = {}
    not_killed, timeouts = [], []
    for name, code in codes.items():
        v = verdict(code)
        if v not in ("killed", "not run"):
            rel = file_of[name]
            diff = mutant_diff(work, name, rel)
            src = (target.project / rel).read_text()
            entry = {"mutant": name, "file": rel, "line": mutant_line(src, name, diff),
                     "verdict": v, "exit_code": code, "diff": diff}
            if v in ("survived", "timeout") and name in equivalent:
                fragment, reason = equivalent[name]
                added = "\n".join(ln for ln in diff.splitlines() if ln.startswith("+"))
                if fragment in added:
                    entry["run_verdict"] = v
                    v = entry["verdict"] = "equivalent"
                    entry["reason"] = reason
                else:
                    entry["stale_equivalence"] = fragment
            (timeouts if v == "timeout" else not_killed).append(entry)
        verdicts[name] = v
    table = summarise(verdicts, file_of)
    return {
        "package": target.package, "tests": target.tests, "left_out": target.leave_out,
        "mutants_total": len(file_of), "mutants_drawn": len(codes),
        "mutants_run": sum(1 for v in verdicts.values() if v != "not run"),
        "sampled": len(codes) < len(file_of),
        "timeout": {"multiplier": TIMEOUT_MULTIPLIER, "constant_s": TIMEOUT_CONSTANT_S},
        "score": score(table["total"]),
        "score_failing_tests_only": score(table["total"], timeouts_kill=False),
        "per_file": table, "not_killed": not_killed, "timeouts": timeouts,
        "verdicts": verdicts, "exit_codes": codes,
    }


def campaign(target: Target, *, sample: int | None, seed: int, workers: int, out: Path,
             report_name: str = "model.json", equivalent: dict[str, tuple[str, str]] | None = None,
             progress: bool = True, time_limit_s: float | None = None) -> dict:
    """Run one campaign and write ``out/<report_name>``; returns the report."""
    equivalent = EQUIVALENT if equivalent is None else equivalent
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    work = out / f"{target.package}-work"
    stage(target, work, seed)
    file_of = list_mutants(work, target.package, workers)
    if not file_of:
        raise MutateError(f"mutmut generated no mutants for {target.package}")
    names = draw_sample(list(file_of), sample, seed)
    print(f"{target.package}: {len(file_of)} mutants, running {len(names)} "
          f"({'all' if len(names) == len(file_of) else f'sample drawn with seed {seed}'}), "
          f"{workers} worker(s), tests seeded with --seed {seed}", flush=True)
    files = {file_of[n] for n in names}
    codes = run_mutmut(work, names, files, workers, out / f"{target.package}-mutmut.log", progress,
                       time_limit_s)
    report = judge(target, work, file_of, codes, equivalent)
    report.update({"seed": seed, "workers": workers, "wall_s": round(time.monotonic() - t0, 1)})
    (out / report_name).write_text(json.dumps(report, indent=1) + "\n")
    return report


def rejudge(target: Target, *, sample: int | None, seed: int, out: Path,
            report_name: str = "model.json") -> dict:
    """The report of the finished run in ``out`` again, with the current :data:`EQUIVALENT`
    (no mutant is run): the same sample from the same seed, mutmut's verdicts as it left them."""
    work = out / f"{target.package}-work"
    if not (work / "mutants").is_dir():
        raise MutateError(f"no finished run in {work}")
    files = sorted({str(p.relative_to(work / "mutants"))[:-len(".meta")]
                    for p in (work / "mutants" / target.package).rglob("*.py.meta")})
    file_of = {}
    for rel in files:
        meta = json.loads((work / "mutants" / (rel + ".meta")).read_text())
        file_of.update({name: rel for name in meta["exit_code_by_key"]})
    names = draw_sample(list(file_of), sample, seed)
    codes = _read_exit_codes(work, set(files))
    report = judge(target, work, file_of, {n: codes.get(n) for n in names}, EQUIVALENT)
    staged = tomllib.loads((work / "pyproject.toml").read_text())["tool"]["mutmut"]
    report["timeout"] = {"multiplier": staged["timeout_multiplier"],
                         "constant_s": staged["timeout_constant"]}
    previous = out / report_name
    if previous.exists():
        old = json.loads(previous.read_text())
        report.update({k: old[k] for k in ("seed", "workers", "wall_s", "timeout") if k in old})
    if report.get("seed") not in (None, seed):
        raise MutateError(f"the run in {out} used --seed {report['seed']}, not {seed}")
    (out / report_name).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainingcxl.mutate.model",
                                description="Mutation testing of sw_model/ against tests/model "
                                            "(mutmut; docs/verification.md).")
    p.add_argument("--sample", type=int, default=None,
                   help="run a random sample of N mutants (default: all of them)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the sample and of the tests' --seed (default 1)")
    p.add_argument("--workers", type=int, default=1,
                   help="mutants run in parallel, one forked process each (default 1)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"report directory (default {DEFAULT_OUT}); model.json goes there")
    p.add_argument("--time-limit", type=float, default=None, metavar="MINUTES",
                   help="stop mutmut after this many minutes and report the mutants that ran "
                        "(the others are counted 'not run'; mutmut runs the fastest first)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: report the finished run in --out again (same --sample and "
                        "--seed) with the current list of reviewed equivalent mutants")
    args = p.parse_args(argv)
    if args.sample is not None and args.sample < 1:
        p.error(f"--sample must be a positive number of mutants, not {args.sample}")
    if args.workers < 1:
        p.error(f"--workers must be at least 1, not {args.workers}")
    if args.seed < 0:
        p.error(f"--seed must be non-negative, not {args.seed}")
    if args.time_limit is not None and args.time_limit <= 0:
        p.error(f"--time-limit must be a positive number of minutes, not {args.time_limit}")
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out must be a directory, not the file {args.out}")
    print(f"seed={args.seed} (rerun with --seed {args.seed})", flush=True)
    try:
        if args.report_only:
            report = rejudge(sw_model_target(), sample=args.sample, seed=args.seed, out=args.out)
        else:
            report = campaign(sw_model_target(), sample=args.sample, seed=args.seed,
                              workers=args.workers, out=args.out, progress=not args.no_progress,
                              time_limit_s=None if args.time_limit is None else 60 * args.time_limit)
    except MutateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report_path = args.out / "model.json"
    print(format_table(report["per_file"]))
    s = report["score"]
    s2 = report["score_failing_tests_only"]
    print(f"score {'-' if s is None else f'{100 * s:.1f} %'} (killed + timeout) / (mutants - "
          f"equivalent - not run), {'-' if s2 is None else f'{100 * s2:.1f} %'} counting only "
          f"the mutants a failing test killed; {report['mutants_run']} of {report['mutants_drawn']} drawn "
          f"of {report['mutants_total']} mutants ran, "
          f"{report.get('wall_s', '-')} s; not killed: {len(report['not_killed'])}, listed in {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
