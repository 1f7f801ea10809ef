"""cosim.model_top: the simulation top that puts compiled models on a design's ports.

A small hand-written design in the form Amaranth's Verilog has (port declarations in the module
body), not the device, so every expectation is read off the text here:
the top keeps the design's other ports, muxes each driven input between the model and an
``ext_`` input by the slot's select, exposes every connected signal as a wire under its own
name, and adds the slot's own wires and inputs; bad slots are refused with the reason.
Verilator lints the result (it must elaborate), and the device's two slots are checked to
drive disjoint signals of the real device.
"""
import ctypes
import subprocess

import pytest

from cosim import build as cb
from types import SimpleNamespace

from cosim.model_top import (CLOCK_PERIOD_SIGNAL, EXT_PREFIX, ModelSlot, design_ports, model_top,
                              simulator_functions, slot_ports, start_clock)

DESIGN = """
module dut(clk, rst, a, a_valid, y, done);
  input clk;
  wire clk;
  input rst;
  wire rst;
  input [7:0] a;
  wire [7:0] a;
  input a_valid;
  wire a_valid;
  output [7:0] y;
  wire [7:0] y;
  output done;
  wire done;
  reg [7:0] r;
  always @(posedge clk) r <= rst ? 8'd0 : (a_valid ? a : r);
  assign y = r;
  assign done = r == 8'hff;
endmodule
"""

MODEL = """
module model (input wire clk, input wire rst, input wire go, output wire [7:0] a,
              output wire a_valid, input wire [7:0] y, output wire busy);
    reg [7:0] c;
    always @(posedge clk) c <= rst ? 8'd0 : c + {7'd0, go};
    assign a = c;
    assign a_valid = go;
    assign busy = y != c;
endmodule
"""


def _slot(**kw):
    args = dict(module="model", text=MODEL, instance="m", select="use_model",
                ports={"a": "a", "a_valid": "a_valid", "y": "y"}, drives=("a", "a_valid"),
                wires=(("model_busy", "busy", 1),), inputs=(("model_go", "go", 1),))
    args.update(kw)
    return ModelSlot(**args)


def test_design_ports_in_order():
    assert design_ports(DESIGN, "dut") == [("input", "clk", 1), ("input", "rst", 1),
                                           ("input", "a", 8), ("input", "a_valid", 1),
                                           ("output", "y", 8), ("output", "done", 1)]
    with pytest.raises(ValueError, match="module nope not found"):
        design_ports(DESIGN, "nope")
    with pytest.raises(ValueError, match="no port declarations"):
        design_ports("module ansi (input wire a);\nendmodule\n", "ansi")


def test_design_ports_leave_out_the_inputs_of_functions():
    """A Yosys netlist (a mutant build's) writes ``$pmux`` cells as functions inside the
    module, with inputs ``a``, ``b``, ``s`` of their own: not ports of the design."""
    netlist = DESIGN.replace("  reg [7:0] r;\n", """  reg [7:0] r;
  function [7:0] _pmux;
    input [7:0] a;
    input [15:0] b;
    input [1:0] s;
    _pmux = s[0] ? b[7:0] : a;
  endfunction
""")
    assert "function" in netlist
    assert design_ports(netlist, "dut") == design_ports(DESIGN, "dut")


def test_top_muxes_driven_inputs_and_lints(tmp_path):
    text = model_top(DESIGN, "dut", "sim_top", [_slot()])
    top = text[text.index("module sim_top"):]
    header = top[top.index("(") + 1:top.index(");")]
    # outside: the design's other ports, the ext_ inputs, the select, the model's own input
    assert [n.strip() for n in header.split(",")] == [
        "clk", "rst", "done", f"{EXT_PREFIX}a", f"{EXT_PREFIX}a_valid", "use_model", "model_go"]
    assert f"assign a = use_model ? cpp_a : {EXT_PREFIX}a;" in top
    assert f"assign a_valid = use_model ? cpp_a_valid : {EXT_PREFIX}a_valid;" in top
    assert "wire [7:0] y;" in top and "wire model_busy;" in top
    assert ".busy(model_busy)" in top and ".go(model_go)" in top and ".y(y)" in top
    f = tmp_path / "top.v"
    f.write_text(text)
    r = subprocess.run(["verilator", "--lint-only", *cb.WAIVERS, "--top-module", "sim_top",
                        str(f)], capture_output=True, text=True, env=cb.verilator_env())
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr[-3000:]


def test_top_with_its_own_clock_lints_under_timing(tmp_path):
    """``clock_ns``: clk is no port of the top but a register toggled every half period, high
    from time 0, and the period is readable; Verilator accepts it with --timing."""
    text = model_top(DESIGN, "dut", "sim_top", [_slot()], clock_ns=10)
    top = text[text.index("module sim_top"):]
    header = [n.strip() for n in top[top.index("(") + 1:top.index(");")].split(",")]
    assert "clk" not in header and header[0] == "rst"
    assert "  reg clk;\n  initial begin clk = 1'b1; forever #5 clk = ~clk; end\n" in top
    assert f"wire [31:0] {CLOCK_PERIOD_SIGNAL} = 32'd10;" in top
    assert ".clk(clk)" in top            # the design and the model both see it
    f = tmp_path / "top.v"
    f.write_text(text)
    r = subprocess.run(["verilator", "--lint-only", "--timing", *cb.WAIVERS, "--top-module",
                        "sim_top", str(f)], capture_output=True, text=True,
                       env=cb.verilator_env())
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("clock_ns", [0, 5, 7, -2, 10.0])
def test_clock_period_must_be_even_ns(clock_ns):
    with pytest.raises(ValueError, match="clock_ns must be an even number of ns"):
        model_top(DESIGN, "dut", "sim_top", [_slot()], clock_ns=clock_ns)


def test_start_clock_leaves_the_tops_clock_and_checks_its_period():
    """On a top with its own clock start_clock starts nothing (the fake top has no clk to
    drive) and refuses a bench period that is not the top's."""
    dut = SimpleNamespace(**{CLOCK_PERIOD_SIGNAL: SimpleNamespace(value=10)})
    start_clock(dut, 10)
    with pytest.raises(ValueError, match="own clock of 10 ns; this bench runs at 8 ns"):
        start_clock(dut, 8)


def _python_samplers():
    from cosim.csr import CsrMaster
    from cosim.cxl_host.channels import ChannelSet
    from cosim.pmem import PmemModel
    from cosim.trace.boundary import TraceRecorder
    from cosim.trace.stimulus import StimulusRecorder
    return {"the Python PMEM model": lambda d, tmp: PmemModel(d, clock=None, reset=None),
            "the Python CXL.mem host": lambda d, tmp: ChannelSet(d, None),
            "the Python CSR master": lambda d, tmp: CsrMaster(d),
            "the boundary trace recorder": lambda d, tmp: TraceRecorder(d, clock=None,
                                                                        period_ns=10),
            "the stimulus recorder": lambda d, tmp: StimulusRecorder(d, tmp / "s", cfg=None)}


@pytest.mark.parametrize("what", list(_python_samplers()))
def test_python_samplers_refuse_a_top_with_its_own_clock(what, tmp_path):
    """Each model or recorder that samples ports on cocotb's clock edges refuses, before it
    touches anything, a top that clocks itself (on it, RisingEdge wakes after the edge)."""
    dut = SimpleNamespace(**{CLOCK_PERIOD_SIGNAL: SimpleNamespace(value=10)})
    with pytest.raises(RuntimeError, match=f"^{what} .*needs a top clocked by cocotb"):
        _python_samplers()[what](dut, tmp_path)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("kw, match", [
    (dict(ports={"a": "a", "b": "b"}, drives=("a",)), "lacks port b"),
    (dict(ports={"y": "y"}, drives=("y",)), "y is an output"),
])
def test_bad_slots_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        model_top(DESIGN, "dut", "sim_top", [_slot(**kw)])


def test_two_slots_driving_one_signal_refused():
    with pytest.raises(ValueError, match="a driven by both model and model"):
        model_top(DESIGN, "dut", "sim_top", [_slot(), _slot(instance="m2", select="s2",
                                                            wires=(), inputs=())])


def test_design_without_clock_refused():
    with pytest.raises(ValueError, match="no clk/rst"):
        model_top(DESIGN.replace("clk", "clock"), "dut", "sim_top", [_slot()])


def test_slot_ports_widths_and_refusals():
    assert slot_ports(DESIGN, "dut", {"a": "input", "y": "output"}, "m") == {"a": 8, "y": 8}
    with pytest.raises(ValueError, match=r"lacks the port signals \['b'\] \(m\)"):
        slot_ports(DESIGN, "dut", {"a": "input", "b": "input"}, "m")
    with pytest.raises(ValueError, match="dut.y is an output, the m needs an input"):
        slot_ports(DESIGN, "dut", {"y": "input"}, "m")


def test_device_slots_drive_disjoint_signals():
    """The PMEM, host and CSR slots of the device drive disjoint design inputs; the host slot
    drives exactly the M2S payload/valid and the S2M readies, the CSR slot the AXI4-Lite
    master's signals (model_top would refuse an overlap; this names what each drives)."""
    from cosim.csr_cpp.wrapper import csr_slot
    from cosim.host_cpp.wrapper import host_slot
    from cosim.pmem_cpp.wrapper import pmem_slot
    from hw.config import DeviceConfig
    v = cb.device_verilog(DeviceConfig())
    pm, host, csr = pmem_slot(v), host_slot(v), csr_slot(v)
    assert not set(pm.drives) & set(host.drives)
    assert not (set(pm.drives) | set(host.drives)) & set(csr.drives)
    assert set(host.drives) == {f"{c}__{p}" for c in ("m2s_req", "m2s_rwd", "m2s_birsp")
                                for p in ("valid", "payload")} | \
        {f"{c}__ready" for c in ("s2m_ndr", "s2m_drs", "s2m_bisnp")}
    assert all(s.startswith("m_axi_") for s in pm.drives)
    assert set(csr.drives) == {f"s_axil__{p}" for p in ("awaddr", "awvalid", "wdata", "wstrb",
                                                          "wvalid", "bready", "araddr",
                                                          "arvalid", "rready")}


def test_simulator_functions_types_what_exists_and_names_what_does_not():
    """Outside a simulator the process's own symbols still hold the C library: a present
    function comes back typed and callable; an absent first name raises the given message."""
    lib = simulator_functions({"strlen": (ctypes.c_size_t, [ctypes.c_char_p])}, "no libc")
    assert lib.strlen.restype is ctypes.c_size_t and lib.strlen(b"model") == 5
    with pytest.raises(RuntimeError, match="^no such model here$"):
        simulator_functions({"tcxl_no_such_function": (None, [])}, "no such model here")
