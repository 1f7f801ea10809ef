"""Mutation testing of the RTL (issue #17 item 3, docs/verification.md "Mutation testing: hw").

    python -m trainingcxl.mutate.hw [--mutants 300] [--seed 1] [--targets csr,dcoh,lookup]
                                    [--workers N] [--timeout-factor 8] [--out build/mutate]

mcy-style: each *target* is a bench top (``hw/testtops/`` or the CSR block; the full device,
``--targets device``, for the blocks only it holds) with the cosim benches that run on it. Its
design goes through Yosys once (``cosim.mutants``): ``mutate -list`` draws candidates evenly
over the netlist, the ones whose source attribute points into the target's blocks (``hw/...``
files, :data:`TARGETS`) are kept, and one Verilator build per target holds all of them behind
an internal selector. A mutant's run is a simulator launch of each
selected bench with ``TRAININGCXL_MUTANT=<id>`` (``+mutsel=<id>``), in a child process killed
after ``--timeout-factor`` times the unmutated run's time.

*Test selection.* A mutant runs the benches of its target that list its block (the block
names of ``trainingcxl.coverage.blocks``). Simulation builds carry no ``src`` attributes, so
the coverage data is per Verilog module, not per Amaranth line: selection is per block.

*Outcomes.* ``killed`` (a bench failed: a cocotb test, an RTL ``Assert``, the simulator died),
``timeout`` (killed by hang), ``survived`` (every selected bench passed), ``equivalent``
(a survivor that Yosys proves equivalent to the original, ``cosim.mutants.prove_equivalent``:
first on the smallest module holding the mutated cell, its ports free, which proves it in any
context and is cheap; with ``--prove-design`` then on the whole design, which does not finish
on the device; only survivors are tried, since a killed mutant is not equivalent;
``--prove-only`` reruns the proofs on an existing report). A mutant whose selection is gone
from the mutant build (``cosim.mutants.selector_values``: the ``opt_clean`` after ``mutate``
removed its logic, as nothing observable depends on it) is ``equivalent`` without a run,
with :data:`REMOVED_WHY`; ``--rerun-survivors`` and ``--prove-only`` apply the same rule to
the campaign's build.
Before any mutant counts, mutant 0 (no mutation, the mutant build itself) must pass every
bench of every target.

*Reproducible campaigns.* A campaign is drawn only from committed hw: with uncommitted
changes under ``hw/`` (``git status --porcelain -- hw/``) the runner stops and names them,
unless ``--allow-dirty-hw`` (then ``"hw_dirty": true`` and the files in the report). The
commit, and per target the design key and the RTLIL the cell names refer to
(``<out>/rtlil/<target>.il.gz``) are recorded in ``<out>/campaign.json`` and hw.json.
``--prove-only`` and ``--rerun-survivors`` prove against that saved RTLIL, so a cell name
means the cell the campaign ran whatever hw/ is by then. A campaign that saved none is
proven against today's RTLIL only when its design key is the one the campaign recorded,
else refused; ``--resume`` and ``--report-only`` refuse when today's draw has other design
keys than the campaign's list.

Exit status 0 when the campaign ran (the score is a result, not a pass/fail), 1 when mutant 0
failed, 2 on bad arguments or a refused campaign. The report: ``<out>/hw.json`` (every mutant
with its source lines, ``mutate`` command and outcome; every survivor listed, with its proof's
result) and a table per block on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Bench", "Target", "TARGETS", "DEFAULT_TARGETS", "draw", "main"]

OUTCOMES = ("killed", "timeout", "survived", "equivalent")
REMOVED_WHY = "removed by synthesis: no logic depends on the mutation"


@dataclass(frozen=True)
class Bench:
    """One cosim bench run against a target's build: its cocotb module, the parameters its
    pytest launcher passes, the fewest tests that must run, and the blocks it covers."""
    module: str
    params: str            # "dcoh_main", "bench_config" or "" (see _params)
    min_tests: int
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class Target:
    name: str
    top: str
    sources: tuple[str, ...]     # hw/ prefixes whose mutants this target owns
    benches: tuple[Bench, ...]
    share: float                 # fraction of --mutants drawn here
    blocks: dict = field(default_factory=dict)


_DEVICE_BLOCKS = ("update", "undo logger", "persist", "snapshot", "command processor")

TARGETS = {
    "csr": Target("csr", "trainingcxl_csr", ("hw/csr/",), (
        Bench("tests.cosim.csr.test_csr", "", 6, ("CSR",)),), 0.25),
    "dcoh": Target("dcoh", "dcoh_testtop", ("hw/dcoh/", "hw/media_axi.py"), (
        Bench("tests.cosim.dcoh.test_dcoh", "dcoh_main", 8, ("DCOH", "media port")),
        Bench("tests.cosim.dcoh.test_dcoh_pressure", "bench_config", 2, ("DCOH",)),
        Bench("tests.cosim.dcoh.test_dcoh_decode", "bench_config", 1, ("DCOH",))), 0.45),
    "lookup": Target("lookup", "lookup_slice", ("hw/gather/",), (
        Bench("tests.cosim.gather.test_gather", "bench_config", 8, ("gather", "DCOH")),
        Bench("tests.cosim.coherent_lookup.test_coherent_lookup", "bench_config", 2,
              ("gather", "DCOH"))), 0.30),
    # the full device (with its compiled models: cosim.build.device_build) for the blocks
    # only it holds; not in the default draw, so the default campaign stays what it was
    "device": Target("device", "trainingcxl_device",
                     ("hw/update/", "hw/undolog/", "hw/persist/", "hw/snapshot/", "hw/cmdproc/"), (
        Bench("tests.cosim.device.test_device", "bench_config", 19, _DEVICE_BLOCKS),
        Bench("tests.cosim.media.test_media", "bench_config", 31, _DEVICE_BLOCKS),
        Bench("tests.cosim.snapshot.test_snapshot", "bench_config", 12,
              ("snapshot", "persist", "command processor"))), 1.0),
}
DEFAULT_TARGETS = ("csr", "dcoh", "lookup")


def _component(target: str):
    from hw.config import DeviceConfig
    if target == "csr":
        from hw.csr.regblock import CsrBlock
        return CsrBlock()
    if target == "dcoh":
        from hw.testtops.dcoh import DcohTestTop
        return DcohTestTop(DeviceConfig())
    if target == "lookup":
        from hw.testtops.lookup_slice import LookupSlice
        return LookupSlice(DeviceConfig())
    if target == "device":
        from hw.top import TrainingCXLDevice
        return TrainingCXLDevice(DeviceConfig())
    raise ValueError(f"unknown target {target!r}")


def _params(kind: str):
    """The parameters the bench's pytest launcher passes (default configuration)."""
    if not kind:
        return None
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    if kind == "bench_config":
        return BenchConfig(DeviceConfig())
    if kind == "dcoh_main":
        from tests.cosim.dcoh.test_dcoh import DcohParams
        return DcohParams(bench=BenchConfig(DeviceConfig()), set="main", messages=1500)
    raise ValueError(f"unknown bench parameters {kind!r}")


def block_of_src(src: str) -> str | None:
    """The hw block (``trainingcxl.coverage.blocks`` names) of a ``hw/...:line`` source."""
    from trainingcxl.coverage.blocks import BLOCKS
    path = src.rsplit(":", 1)[0]
    for b in BLOCKS:
        if path == b.source or (b.source.endswith("/") and path.startswith(b.source)):
            return b.name
    return None


def _own_src(cand: dict, target: Target) -> str | None:
    """The candidate's innermost source line inside the target's blocks (Yosys lists the
    cell's ``src`` attribute entries, the statement last), or None."""
    for s in reversed(cand["src"]):
        if s.startswith(target.sources):
            return s
    return None


def draw(targets: list[str], n: int, seed: int, log=print) -> dict:
    """The campaign's mutants: ``n`` split over ``targets`` by their share, each drawn from
    a ``mutate -list`` sample of the target's netlist filtered to its own sources. Returns the
    list file's content plus a ``mutants`` table (id, target, block, src, cmd, mode) and
    ``rtlil``: each target's (RTLIL, design key), the netlist the cell names refer to."""
    from cosim import mutants as mu
    shares = [TARGETS[t].share for t in targets]
    want = [max(1, round(n * s / sum(shares))) for s in shares]
    want[-1] = n - sum(want[:-1])
    designs, table, next_id, texts = {}, [], 1, {}
    for t, k in zip(targets, want):
        tgt = TARGETS[t]
        t0 = time.monotonic()
        rtlil, key = mu.design_rtlil(_component(t), tgt.top)
        texts[t] = (rtlil, key)
        pool = mu.list_candidates(rtlil, tgt.top, max(20 * k, 1000), seed)
        own = [(c, _own_src(c, tgt)) for c in pool]
        own = [(c, s) for c, s in own if s is not None]
        seen, picked = set(), []
        for c, s in own:
            if c["cmd"] not in seen:
                seen.add(c["cmd"])
                picked.append((c, s))
        # the sample is spread evenly over the netlist; take every stride-th to keep it so
        stride = max(1, len(picked) // k) if k else 1
        picked = picked[::stride][:k]
        if len(picked) < k:
            log(f"mutate-hw: {t}: only {len(picked)} candidates in {tgt.sources} "
                f"(wanted {k})")
        muts = []
        for c, s in picked:
            muts.append([next_id, c["cmd"]])
            table.append({"id": next_id, "target": t, "block": block_of_src(s), "src": s,
                          "src_all": c["src"], "cmd": c["cmd"], "mode": c["mode"],
                          "wire": c["wire"]})
            next_id += 1
        designs[key] = {"top": tgt.top, "mutants": muts}
        log(f"mutate-hw: {t}: {len(muts)} mutants from {len(pool)} candidates "
            f"({len(own)} in {', '.join(tgt.sources)}), {time.monotonic() - t0:.0f} s")
    return {"seed": seed, "designs": designs, "mutants": table, "rtlil": texts}


# ------------------------------------------------------------------------- campaign records
class CampaignError(RuntimeError):
    """A campaign cannot be drawn, resumed or proven as asked (printed, exit status 2)."""


def hw_changes(root: Path | None = None) -> list[str]:
    """``git status --porcelain -- hw/`` of the checkout (one line per changed file)."""
    from cosim.mutants import repo_root
    root = repo_root() if root is None else root
    try:
        r = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "hw/"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CampaignError(f"cannot tell whether hw/ is clean: {e}") from None
    if r.returncode:
        raise CampaignError(f"cannot tell whether hw/ is clean: git status failed: "
                            f"{r.stderr.strip()}")
    return [line for line in r.stdout.splitlines() if line.strip()]


def _head(root: Path | None = None) -> str | None:
    from cosim.mutants import repo_root
    r = subprocess.run(["git", "-C", str(repo_root() if root is None else root), "rev-parse",
                        "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def check_hw_clean(allow_dirty: bool, changes=None) -> list[str]:
    """The changed hw/ files; a :class:`CampaignError` naming them unless ``allow_dirty``:
    a campaign drawn from uncommitted hw cannot be rebuilt from any commit."""
    changes = hw_changes() if changes is None else changes
    if changes and not allow_dirty:
        raise CampaignError(
            "hw/ has uncommitted changes, so the campaign's design would match no commit:\n  "
            + "\n  ".join(changes) + "\ncommit them (or stash them), or pass --allow-dirty-hw "
            "(recorded as \"hw_dirty\": true in hw.json)")
    return changes


def campaign_record(out: Path, rtlil: dict, changes: list[str]) -> dict:
    """What ``campaign.json`` (and hw.json) record of the draw: the commit, whether hw/ was
    dirty, and per target its top, design key and prepared-from RTLIL, saved gzipped as
    ``rtlil/<target>.il.gz`` in ``out`` so proofs later use the netlist the cell names came
    from whatever hw/ is by then."""
    import gzip
    (out / "rtlil").mkdir(parents=True, exist_ok=True)
    saved = {}
    for t, (text, key) in rtlil.items():
        rel = f"rtlil/{t}.il.gz"
        with gzip.open(out / rel, "wt") as f:
            f.write(text)
        saved[t] = {"top": TARGETS[t].top, "key": key, "file": rel}
    record = {"commit": _head(), "hw_dirty": bool(changes), "rtlil": saved}
    if changes:
        record["hw_changes"] = changes
    return record


def campaign_rtlil(report: dict, out: Path, targets, today=None) -> dict:
    """``{target: (RTLIL, design key)}`` the campaign's mutants were drawn from: the RTLIL
    saved with the campaign (its key checked), or, for a campaign that saved none, today's
    RTLIL when its key is the one the campaign recorded (hw.json, else the list file
    ``mutants.json``). Otherwise a :class:`CampaignError`: applied to other hw, a cell name
    of the draw may name another cell, or none. ``today(target)`` gives today's (RTLIL, key)."""
    import gzip
    from cosim import mutants as mu
    if today is None:
        def today(t):
            return mu.design_rtlil(_component(t), TARGETS[t].top)
    saved = report.get("rtlil") or {}
    listed = {}
    if (out / "mutants.json").is_file():
        for key, d in json.loads((out / "mutants.json").read_text())["designs"].items():
            listed.setdefault(d["top"], []).append(key)
    got = {}
    for t in targets:
        entry = saved.get(t)
        if entry and (out / entry["file"]).is_file():
            text = gzip.open(out / entry["file"], "rt").read()
            if mu.design_key(text) != entry["key"]:
                raise CampaignError(f"{out / entry['file']}: not the RTLIL of design key "
                                    f"{entry['key']} (changed since the draw)")
            got[t] = (text, entry["key"])
            continue
        keys = [entry["key"]] if entry else listed.get(TARGETS[t].top, [])
        text, key = today(t)
        if keys != [key]:
            raise CampaignError(
                f"campaign {out} saved no RTLIL of target {t}, and today's hw gives design "
                f"key {key}, not the campaign's ({', '.join(keys) or 'none recorded'}): its "
                f"cell names may name other cells now. Prove against the hw it was drawn "
                f"from (a checkout of its commit, {report.get('commit') or 'not recorded'}), "
                f"or draw a new campaign")
        got[t] = (text, key)
    return got


def _mutant_design(t: str):
    """(Verilog of target ``t``'s design as the mutant list makes it, a function that builds
    it): the full device in its model top (``cosim.build.device_build``), the others alone."""
    from cosim import build as cb
    tgt = TARGETS[t]
    if t == "device":
        from hw.config import DeviceConfig
        cfg = DeviceConfig()
        return cb.device_verilog(cfg, name=tgt.top), lambda: cb.device_build(cfg)
    text = cb.generate_verilog(_component(t), name=tgt.top)
    return text, lambda: cb.build(text, top=tgt.top)


def _builds(targets: list[str], list_file: Path, log=print) -> dict:
    """One Verilator build per target from the mutant list (cached by content)."""
    from cosim import build as cb
    os.environ[cb.MUTANTS_ENV] = str(list_file)
    out = {}
    try:
        for t in targets:
            t0 = time.monotonic()
            text, build = _mutant_design(t)
            if cb.MUTANT_MARKER not in text:
                raise RuntimeError(f"{t}: the list does not name this design (stale list?)")
            b = build()
            out[t] = {"build_dir": str(b.build_dir), "top": b.top, "key": b.key}
            log(f"mutate-hw: {t}: mutant build {b.build_dir} ({time.monotonic() - t0:.0f} s)")
    finally:
        os.environ.pop(cb.MUTANTS_ENV, None)
    return out


def removed_by_synthesis(build: dict, design_top: str, ids) -> set[int] | None:
    """The mutants of ``ids`` (every mutant of the design ``design_top``) whose selection the
    mutant build no longer holds (``cosim.mutants.selector_values`` on the Verilog it was
    compiled from); None when that cannot be told (the selector read in another way, or
    compared with a value that is no mutant of the list): then every mutant runs."""
    from cosim import mutants as mu
    text = (Path(build["build_dir"]) / f"{build['top']}.v").read_text()
    values = mu.selector_values(text, design_top)
    ids = set(ids)
    if values is None or not values <= ids:
        return None
    return ids - values


def mark_removed(table: list[dict], builds: dict, log=print) -> list[int]:
    """Mutants of ``table`` (every mutant of the draw) that have not run or survived, and
    whose selection is gone from their target's mutant build (:func:`removed_by_synthesis`),
    become ``equivalent`` with
    :data:`REMOVED_WHY` (a survivor keeps ``first_outcome``). A removed mutant that a bench
    killed is left as it is and reported: it would contradict the rule. Returns their ids."""
    marked = []
    for t in sorted({m["target"] for m in table}):
        mine = [m for m in table if m["target"] == t]
        build = builds.get(t)
        if build is None or not (Path(build["build_dir"]) / f"{build['top']}.v").is_file():
            log(f"mutate-hw: {t}: no mutant build's Verilog to look for removed mutants in")
            continue
        removed = removed_by_synthesis(build, TARGETS[t].top, [m["id"] for m in mine])
        if removed is None:
            log(f"mutate-hw: {t}: the selector is not read as one comparison per mutant; "
                f"no mutant is classified as removed, all run")
            continue
        for m in mine:
            if m["id"] not in removed:
                continue
            if m.get("outcome") == "equivalent":
                continue
            if m.get("outcome") in ("killed", "timeout"):
                log(f"mutate-hw: mutant {m['id']} has no logic in the build but was "
                    f"{m['outcome']}: left as it is (look at it)")
                continue
            if m.get("outcome") == "survived":
                m.setdefault("first_outcome", "survived")
            m.update({"outcome": "equivalent", "why": REMOVED_WHY, "bench": None})
            marked.append(m["id"])
        log(f"mutate-hw: {t}: {len(removed)} of {len(mine)} mutants removed by synthesis "
            f"(not run): {sorted(removed)}")
    return marked


# ---------------------------------------------------------------------------------- one run
def run_bench(build: dict, bench: Bench, mutant: int, seed: int, test_dir: Path) -> None:
    """One simulator launch of ``bench`` with ``mutant`` active (in this process); raises
    ``cosim.build.CosimError`` when it fails."""
    from cosim import build as cb
    b = cb.Build(build_dir=Path(build["build_dir"]), top=build["top"], key=build["key"],
                 waves=False)
    os.environ[cb.MUTANT_ENV] = str(mutant)
    res = cb.run(b, bench.module, seed=seed, params=_params(bench.params), test_dir=test_dir,
                 quiet=True)
    if res.n_ran < bench.min_tests:
        raise cb.CosimError(f"{bench.module}: {res.n_ran} tests ran, expected at least "
                            f"{bench.min_tests}")


def _child(argv) -> int:
    """``--child JSON``: run one bench against one mutant; exit 0 pass, 3 killed."""
    job = json.loads(argv)
    from cosim import build as cb
    bench = Bench(**{**job["bench"], "blocks": tuple(job["bench"]["blocks"])})
    try:
        run_bench(job["build"], bench, job["mutant"], job["seed"], Path(job["test_dir"]))
    except cb.CosimError as e:
        print(str(e)[-2000:], file=sys.stderr)
        return 3
    return 0


def run_mutant(job: dict, progress=None) -> dict:
    """Run the mutant's selected benches in child processes, first failure ends it.
    ``job``: mutant, seed, build, benches (dicts), timeouts (s), out. Returns the outcome."""
    t0 = time.monotonic()
    runs = Path(job["out"]) / f"m{job['mutant']:04d}"
    for i, bench in enumerate(job["benches"]):
        child = {"bench": bench, "build": job["build"], "mutant": job["mutant"],
                 "seed": job["seed"], "test_dir": str(runs / f"b{i}")}
        p = subprocess.Popen([sys.executable, "-m", "trainingcxl.mutate.hw", "--child",
                              json.dumps(child)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, err = p.communicate(timeout=job["timeouts"][i])
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)     # the child and its simulator
            p.communicate()
            return {"outcome": "timeout", "bench": bench["module"],
                    "seconds": round(time.monotonic() - t0, 1)}
        if p.returncode != 0:
            return {"outcome": "killed", "bench": bench["module"],
                    "why": (err or "")[-600:], "seconds": round(time.monotonic() - t0, 1)}
    import shutil
    shutil.rmtree(runs, ignore_errors=True)
    return {"outcome": "survived", "bench": None, "seconds": round(time.monotonic() - t0, 1)}


def _run_job(job, progress=None):
    """One mutant; its result is also appended to ``<out>/results.jsonl`` at once, so an
    interrupted campaign resumes (``--resume``) without losing what finished."""
    r = {"id": job["mutant"], **run_mutant(job, progress)}
    with open(job["results"], "a") as f:
        f.write(json.dumps({**r, "list": job["list"]}) + "\n")
    return r


def _done_results(path: Path, list_digest: str) -> dict:
    """Results already in ``results.jsonl`` for this mutant list (by id)."""
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if r.get("list") == list_digest:
                    done[r["id"]] = r
    return done


# ---------------------------------------------------------------------------------- report
def summarise(table: list[dict]) -> dict:
    """Counts per block and in total; the score is killed (timeouts included) over the
    non-equivalent mutants that ran."""
    blocks: dict = {}
    for m in table:
        b = blocks.setdefault(m["block"] or "other", {o: 0 for o in OUTCOMES})
        if m.get("outcome") in OUTCOMES:
            b[m["outcome"]] += 1
    total = {o: sum(b[o] for b in blocks.values()) for o in OUTCOMES}

    def score(c):
        ran = c["killed"] + c["timeout"] + c["survived"]
        return round(100 * (c["killed"] + c["timeout"]) / ran, 1) if ran else None
    for c in [*blocks.values(), total]:
        c["score_pct"] = score(c)
    return {"blocks": blocks, "total": total}


def print_table(summary: dict, out=print) -> None:
    out(f"{'block':<20}{'killed':>8}{'timeout':>9}{'survived':>10}{'equiv':>7}{'score':>8}")
    for name, c in [*sorted(summary["blocks"].items()), ("total", summary["total"])]:
        s = "-" if c["score_pct"] is None else f"{c['score_pct']:.1f}%"
        out(f"{name:<20}{c['killed']:>8}{c['timeout']:>9}{c['survived']:>10}"
            f"{c['equivalent']:>7}{s:>8}")


def _parser():
    p = argparse.ArgumentParser(prog="python -m trainingcxl.mutate.hw",
                                description="Mutation testing of hw/ (mcy-style, Yosys mutate)")
    p.add_argument("--mutants", type=int, default=300, metavar="N",
                   help="mutants to draw over the targets (default 300)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the draw (Yosys mutate -seed) and of the benches (default 1)")
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help=f"comma-separated bench tops (default {','.join(DEFAULT_TARGETS)}; "
                        f"also: {', '.join(t for t in TARGETS if t not in DEFAULT_TARGETS)})")
    p.add_argument("--timeout-factor", type=float, default=8.0, metavar="F",
                   help="a mutant's bench times out after F times the unmutated run "
                        "(at least 60 s; default 8)")
    p.add_argument("--out", type=Path, default=Path("build/mutate"),
                   help="report directory (default build/mutate): hw.json, mutants.json")
    p.add_argument("--only", default=None, metavar="IDS",
                   help="run only these mutant ids (comma-separated) of the drawn list")
    p.add_argument("--prove-timeout", type=float, default=120.0, metavar="S",
                   help="seconds for each survivor's equivalence proof (0: no proofs; "
                        "default 120)")
    p.add_argument("--prove-design", action="store_true",
                   help="after the module proof, try the whole-design proof too (slow: it "
                        "does not finish on the device)")
    p.add_argument("--allow-dirty-hw", action="store_true",
                   help="draw even when hw/ has uncommitted changes (recorded as "
                        "\"hw_dirty\": true; such a campaign matches no commit)")
    p.add_argument("--proofs-cached-only", action="store_true",
                   help="use only the proofs already in <out>/proofs.json (no new ones)")
    p.add_argument("--prove-only", action="store_true",
                   help="only (re)run the equivalence proofs of <out>/hw.json's survivors")
    p.add_argument("--rerun-survivors", action="store_true",
                   help="run <out>/hw.json's survivors again against today's benches (tests "
                        "added since), then prove the rest; the report keeps first outcomes")
    p.add_argument("--exclude-benches", default=None, metavar="MODULES",
                   help="comma-separated bench modules to leave out (to measure the regression "
                        "as it stood before tests were added)")
    p.add_argument("--report-only", action="store_true",
                   help="no runs: the report of what <out>/results.jsonl holds for this draw "
                        "(an interrupted campaign)")
    p.add_argument("--resume", action="store_true",
                   help="keep the results in <out>/results.jsonl of the same mutant list and run "
                        "only the rest (an interrupted campaign)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    from trainingcxl import cluster
    cluster.add_arguments(p)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1])
    from trainingcxl import cluster
    parser = _parser()
    args = parser.parse_args(argv)
    cluster.check_arguments(parser, args)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        parser.error(f"--targets: unknown {bad or 'none given'}; choose from {', '.join(TARGETS)}")
    if args.mutants < len(targets):
        parser.error(f"--mutants must be at least the number of targets ({len(targets)}), "
                     f"got {args.mutants}")
    if args.timeout_factor <= 1:
        parser.error(f"--timeout-factor must be > 1, got {args.timeout_factor:g}")
    only = None
    if args.only:
        try:
            only = {int(x) for x in args.only.split(",") if x.strip()}
        except ValueError:
            parser.error(f"--only takes comma-separated mutant ids, got {args.only!r}")

    if args.prove_timeout < 0:
        parser.error(f"--prove-timeout must be >= 0, got {args.prove_timeout:g}")

    t_start = time.monotonic()
    out = args.out.resolve()
    if args.prove_only or args.rerun_survivors:
        if not (out / "hw.json").is_file():
            parser.error(f"no report {out / 'hw.json'} to work on (run the campaign first)")
        report = json.loads((out / "hw.json").read_text())
        exclude = {x.strip() for x in (args.exclude_benches or "").split(",") if x.strip()}
        rtlil = {}
        if args.prove_timeout:      # before any rerun: refuse early when it cannot be proven
            try:
                rtlil = campaign_rtlil(report, out, sorted(
                    {m["target"] for m in report["mutants"] if m.get("outcome") == "survived"}))
            except CampaignError as e:
                print(f"mutate-hw: {e}", file=sys.stderr)
                return 2
        mark_removed(report["mutants"], report["builds"])
        if args.rerun_survivors and _rerun_survivors(report, out, args.timeout_factor, exclude):
            return 1
        if args.prove_timeout:
            _prove_survivors(report["mutants"], rtlil, args.prove_timeout, out / "proofs.json",
                             args.proofs_cached_only, args.prove_design)
        return _finish(report, out, time.monotonic() - t_start)
    try:
        changes = check_hw_clean(args.allow_dirty_hw)
    except CampaignError as e:
        print(f"mutate-hw: {e}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    print(f"mutate-hw: seed {args.seed} (reproduce: --seed {args.seed}), targets "
          f"{','.join(targets)}, {args.mutants} mutants")
    drawn = draw(targets, args.mutants, args.seed)
    list_file = out / "mutants.json"
    record_file = out / "campaign.json"
    if (args.resume or args.report_only) and list_file.is_file():
        before = sorted(json.loads(list_file.read_text())["designs"])
        if before != sorted(drawn["designs"]):
            print(f"mutate-hw: the campaign in {out} was drawn from other hw (design keys "
                  f"{', '.join(before)}; today's: {', '.join(sorted(drawn['designs']))}): "
                  f"its results name other mutants. Check out its commit to resume or "
                  f"report it", file=sys.stderr)
            return 2
    list_file.write_text(json.dumps({"designs": drawn["designs"]}, indent=1) + "\n")
    if (args.resume or args.report_only) and record_file.is_file():
        record = json.loads(record_file.read_text())     # the draw's, not this step's
    else:
        record = campaign_record(out, drawn["rtlil"], changes)
        record_file.write_text(json.dumps(record, indent=1) + "\n")
    table = drawn["mutants"]
    import hashlib
    digest = hashlib.sha256(list_file.read_bytes()).hexdigest()[:16]
    results_file = out / "results.jsonl"
    exclude = {x.strip() for x in (args.exclude_benches or "").split(",") if x.strip()}
    if args.report_only:
        if not results_file.is_file():
            parser.error(f"--report-only: no {results_file}")
        done = _done_results(results_file, digest)
        for m in table:
            if m["id"] in done:
                m.update({k: v for k, v in done[m["id"]].items() if k not in ("id", "list")})
        builds = _builds(targets, list_file)
        mark_removed(table, builds)
        report = {"seed": args.seed, "targets": targets, "generated": len(table),
                  "excluded_benches": sorted(exclude), "partial": len(done) < len(table),
                  **record, "builds": builds, "mutants": table}
        return _finish(report, out, time.monotonic() - t_start)
    builds = _builds(targets, list_file)
    removed = set(mark_removed(table, builds))

    timeouts = _check_mutant_0(targets, builds, args.seed, args.timeout_factor, out, exclude)
    if timeouts is None:
        return 1
    done = _done_results(results_file, digest) if args.resume else {}
    if not args.resume and results_file.exists():
        results_file.unlink()
    if done:
        print(f"mutate-hw: resuming: {len(done)} mutants already done in {results_file}")
    jobs = _jobs([m for m in table if (only is None or m["id"] in only)
                  and m["id"] not in done and m["id"] not in removed],
                 builds, timeouts, args.seed, out, exclude)
    for j in jobs:
        j.update({"results": str(results_file), "list": digest})
    # in a seeded random order, so a campaign cut short is an even sample of every target
    import random
    random.Random(args.seed).shuffle(jobs)

    def job(ex):
        return ex.map(_run_job, jobs, desc=f"mutants seed {args.seed}", unit="mutant",
                      progress=not args.no_progress)
    results = list(done.values())
    rc = cluster.run_with_executor("mutate-hw", args, lambda ex: results.extend(job(ex)) or 0)
    if rc:
        return rc
    by_id = {r["id"]: {k: v for k, v in r.items() if k != "list"} for r in results}
    for m in table:
        if m["id"] in by_id and m["id"] not in removed:
            m.update({k: v for k, v in by_id[m["id"]].items() if k != "id"})
    report = {"seed": args.seed, "targets": targets, "generated": len(table),
              "excluded_benches": sorted(exclude),
              "timeouts_s": {f"{t}:{i}": round(v) for (t, i), v in timeouts.items()},
              **record, "builds": builds, "mutants": table}
    (out / "hw.json").write_text(json.dumps(report, indent=1) + "\n")   # before the proofs
    if args.prove_timeout:
        _prove_survivors(table, drawn["rtlil"], args.prove_timeout, out / "proofs.json",
                         whole_design=args.prove_design)
    return _finish(report, out, time.monotonic() - t_start)


def _check_mutant_0(targets, builds, seed, factor, out, exclude=()) -> dict | None:
    """Mutant 0 (no mutation) must pass every bench of every target on the mutant build; its
    time sets each bench's timeout. None (after printing why) when it fails."""
    timeouts = {}
    for t in targets:
        for i, bench in enumerate(TARGETS[t].benches):
            if bench.module in exclude:
                continue
            t0 = time.monotonic()
            r = run_mutant({"mutant": 0, "seed": seed, "build": builds[t],
                            "benches": [_bench_dict(bench)], "timeouts": [3600],
                            "out": str(out / "runs" / t)})
            took = time.monotonic() - t0
            if r["outcome"] != "survived":
                print(f"mutate-hw: mutant 0 (no mutation) FAILED {bench.module} on {t}: "
                      f"{r.get('why', r['outcome'])}", file=sys.stderr)
                return None
            timeouts[(t, i)] = max(60.0, factor * took)
            print(f"mutate-hw: mutant 0 passes {bench.module} on {t} ({took:.0f} s)")
    return timeouts


def _jobs(mutants, builds, timeouts, seed, out, exclude=()) -> list[dict]:
    """One job per mutant: the benches of its target that cover its block (less ``exclude``)."""
    jobs = []
    for m in mutants:
        tgt = TARGETS[m["target"]]
        sel = [(i, b) for i, b in enumerate(tgt.benches)
               if m["block"] in b.blocks and b.module not in exclude]
        m["benches"] = [b.module for _, b in sel]
        jobs.append({"mutant": m["id"], "seed": seed, "build": builds[m["target"]],
                     "benches": [_bench_dict(b) for _, b in sel],
                     "timeouts": [timeouts[(m["target"], i)] for i, _ in sel],
                     "out": str(out / "runs" / m["target"])})
    return jobs


def _rerun_survivors(report: dict, out: Path, factor: float, exclude=()) -> int:
    """Run the survivors of ``report`` again against the benches as they are now (tests added
    since the campaign; ``exclude`` leaves out benches they already passed); a survivor killed
    now keeps ``first_outcome: survived``."""
    builds, seed = report["builds"], report["seed"]
    targets = sorted({m["target"] for m in report["mutants"] if m.get("outcome") == "survived"})
    timeouts = _check_mutant_0(targets, builds, seed, factor, out, exclude)
    if timeouts is None:
        return 1
    again = [m for m in report["mutants"] if m.get("outcome") == "survived"]
    jobs = _jobs(again, builds, timeouts, seed, out, exclude)
    again, jobs = [m for m, j in zip(again, jobs) if j["benches"]], [j for j in jobs if j["benches"]]
    for job, m in zip(jobs, again):
        r = run_mutant(job)
        m.setdefault("first_outcome", m["outcome"])
        m.update(r)
        print(f"mutate-hw: survivor {m['id']} ({m['src']}) against today's benches: "
              f"{r['outcome']}" + (f" by {r['bench']}" if r.get("bench") else ""), flush=True)
    return 0


def _prove_survivors(table: list[dict], rtlil: dict, timeout: float, cache: Path | None = None,
                     cached_only: bool = False, whole_design: bool = False, log=print) -> None:
    """Survivors proven equivalent (``cosim.mutants.prove_equivalent``) become ``equivalent``.
    Each is tried on the smallest module holding its cell first (``scope="module"``: cheap,
    and conservative), then, with ``whole_design``, on the whole design. ``rtlil[target]``
    is the (RTLIL, design key) the mutant was drawn from (:func:`campaign_rtlil`), so the
    cell names mean the cells the campaign ran. Mutations of a clock input are never proven
    (see ``cosim.mutants._is_clock_mutation``). ``cache`` (a JSON file) keeps each proof by
    design key, scope and mutation, so a rerun does not redo them; a survivor whose proof
    failed before is tried again when ``timeout`` is longer than the failed attempt's."""
    from cosim import mutants as mu
    todo = [m for m in table if m.get("outcome") == "survived"]
    known = json.loads(cache.read_text()) if cache and cache.is_file() else {}
    for m in todo:
        if mu._is_clock_mutation(m["cmd"]):
            m["proof"] = "not attempted (clock port)"
            continue
        t = m["target"]
        text, key = rtlil[t]
        try:
            m["proof_module"] = mu.local_mutation(text, TARGETS[t].top, m["cmd"])[1] or "(top)"
        except mu.MutantError as e:
            m["proof_module"] = f"unresolved: {e}"
        notes, proven_by = [], None
        for scope in ("module", "design") if whole_design else ("module",):
            # design-scope entries keep the key they had before module proofs existed
            ck = f"{key} {m['cmd']}" if scope == "design" else f"{key} module {m['cmd']}"
            k = known.get(ck)
            if k and k.get("status", "").startswith("error") and not cached_only:
                k = None                    # quick to redo, and the cause may be fixed since
            if k and (k["proven"] or k["timeout"] >= timeout or cached_only):
                proven, limit, status = k["proven"], k["timeout"], k.get("status")
            elif cached_only:
                notes.append(f"{scope}: not attempted")
                continue
            else:
                t0 = time.monotonic()
                status = mu.equivalence(text, TARGETS[t].top, m["cmd"], scope=scope,
                                        timeout=timeout)
                proven, limit = status == "proven", timeout
                known[ck] = {"proven": proven, "timeout": timeout, "status": status,
                             "seconds": round(time.monotonic() - t0, 1)}
                if cache:
                    cache.write_text(json.dumps(known, indent=1) + "\n")
            if proven:
                proven_by = scope
                break
            why = {"unproven": "not proven (matches left unproven)",
                   "timeout": "no proof within", None: "not proven within"}.get(status, status)
            notes.append(f"{scope}: {why}" + (f" {limit:g} s" if status in ("timeout", None)
                                              else ""))
        where = {"module": f"module {m['proof_module']}", "design": "whole design"}
        m["proof"] = (f"proven ({where[proven_by]})" if proven_by else
                      "; ".join(notes).replace("module:", f"{where['module']}:"))
        log(f"mutate-hw: survivor {m['id']} ({m['src']}): equivalence {m['proof']}")
        if proven_by:
            m["outcome"] = "equivalent"


def _finish(report: dict, out: Path, wall: float) -> int:
    table = report["mutants"]
    ran = [m for m in table if "outcome" in m]
    summary = summarise(ran)
    report.update({"ran": len(ran), "step_wall_s": round(wall, 1), "summary": summary,
                   "survivors": [m for m in ran if m["outcome"] == "survived"],
                   "equivalent": [m for m in ran if m["outcome"] == "equivalent"]})
    (out / "hw.json").write_text(json.dumps(report, indent=1) + "\n")
    print_table(summary)
    print(f"mutate-hw: {len(ran)} of {len(table)} mutants have run ({wall / 60:.1f} min in "
          f"this step); {len(report['survivors'])} survivors listed in {out / 'hw.json'}")
    for m in report["survivors"]:
        print(f"  survivor {m['id']:4d} {m['block'] or 'other':<12} {m['src']:<28} {m['cmd']}")
    return 0


def _bench_dict(b: Bench) -> dict:
    return {"module": b.module, "params": b.params, "min_tests": b.min_tests,
            "blocks": list(b.blocks)}


if __name__ == "__main__":
    sys.exit(main())
