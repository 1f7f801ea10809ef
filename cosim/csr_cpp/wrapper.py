"""Verilog that puts the compiled AXI4-Lite CSR master (``csr_dpi.cpp``) on a design's CSR port.

:func:`csr_slot` is the :class:`cosim.model_top.ModelSlot` of the module
``trainingcxl_csr_dpi``: on every rising clock edge it calls the DPI-C function
``tcxl_csr_edge`` with the port's values (and the design's ``irq``) as the edge samples them
and registers what it returns (non-blocking, so the design sees them after the edge, as it
sees cocotb's writes). It drives AW, W and AR (valid, address, data, strobes; all valid low
while reset is high) and BREADY/RREADY (high outside reset), and has an output ``busy`` (a wire
``csr_cpp_busy`` of the top) that is high while a job is running. With the select input
``csr_cpp`` low, the top's ``ext_`` inputs drive those signals instead: that is where the
Python master (:class:`cosim.csr.CsrMaster`, cocotbext-axi) writes on this top; the module sees
its select (``selected``) and takes no handshake of the port while it is low.
"""
from __future__ import annotations

from pathlib import Path

from cosim.model_top import ModelSlot, outside_input, slot_ports

__all__ = ["CPP_SOURCE", "CSR_MODULE", "SELECT_PORT", "BUSY", "csr_slot", "csr_input"]

CPP_SOURCE = Path(__file__).resolve().parent / "csr_dpi.cpp"
CSR_MODULE = "trainingcxl_csr_dpi"
SELECT_PORT = "csr_cpp"       # 1: the compiled master drives the port, 0: the ext_ inputs do
BUSY = "csr_cpp_busy"         # wire of the top: a job of the compiled master is running

# module port -> (design signal suffix after the prefix, the design's direction)
_PORTS = {
    "awaddr": "input", "awvalid": "input", "awready": "output",
    "wdata": "input", "wstrb": "input", "wvalid": "input", "wready": "output",
    "bresp": "output", "bvalid": "output", "bready": "input",
    "araddr": "input", "arvalid": "input", "arready": "output",
    "rdata": "output", "rresp": "output", "rvalid": "output", "rready": "input",
}


def _module(aw: int) -> str:
    return f"""
// The compiled AXI4-Lite CSR master (cosim/csr_cpp/csr_dpi.cpp) on the CSR port.
module {CSR_MODULE} (
    input  wire clk,
    input  wire rst,
    input  wire selected,
    input  wire irq,
    output wire [{aw - 1}:0] awaddr,
    output wire awvalid,
    input  wire awready,
    output wire [31:0] wdata,
    output wire [3:0] wstrb,
    output wire wvalid,
    input  wire wready,
    input  wire [1:0] bresp,
    input  wire bvalid,
    output wire bready,
    output wire [{aw - 1}:0] araddr,
    output wire arvalid,
    input  wire arready,
    input  wire [31:0] rdata,
    input  wire [1:0] rresp,
    input  wire rvalid,
    output wire rready,
    output wire busy
);
    import "DPI-C" function int tcxl_csr_edge(
        input bit rst, input bit selected, input bit awready, input bit wready,
        input bit bvalid, input bit [1:0] bresp, input bit arready, input bit rvalid,
        input bit [31:0] rdata, input bit [1:0] rresp, input bit irq,
        output bit awvalid, output bit [{aw - 1}:0] awaddr, output bit wvalid,
        output bit [31:0] wdata, output bit [3:0] wstrb, output bit arvalid,
        output bit [{aw - 1}:0] araddr, output bit busy);

    bit n_awvalid, n_wvalid, n_arvalid, n_busy;
    bit [{aw - 1}:0] n_awaddr, n_araddr;
    bit [31:0] n_wdata;
    bit [3:0] n_wstrb;
    reg q_awvalid, q_wvalid, q_arvalid, q_busy;
    reg [{aw - 1}:0] q_awaddr, q_araddr;
    reg [31:0] q_wdata;
    reg [3:0] q_wstrb;

    always @(posedge clk) begin
        void'(tcxl_csr_edge(rst, selected, awready, wready, bvalid, bresp, arready, rvalid,
                            rdata, rresp, irq, n_awvalid, n_awaddr, n_wvalid, n_wdata, n_wstrb,
                            n_arvalid, n_araddr, n_busy));
        q_awvalid <= n_awvalid;
        q_awaddr <= n_awaddr;
        q_wvalid <= n_wvalid;
        q_wdata <= n_wdata;
        q_wstrb <= n_wstrb;
        q_arvalid <= n_arvalid;
        q_araddr <= n_araddr;
        q_busy <= n_busy;
    end

    assign awvalid = q_awvalid & ~rst;
    assign awaddr = q_awaddr;
    assign wvalid = q_wvalid & ~rst;
    assign wdata = q_wdata;
    assign wstrb = q_wstrb;
    assign bready = ~rst;
    assign arvalid = q_arvalid & ~rst;
    assign araddr = q_araddr;
    assign rready = ~rst;
    assign busy = q_busy;
endmodule
"""


def csr_slot(verilog_text: str, top: str = "trainingcxl_device",
             prefix: str = "s_axil") -> ModelSlot:
    """The compiled master on the AXI4-Lite port ``<prefix>__*`` of ``top`` (selected by
    ``csr_cpp``), reading the design's ``irq``."""
    wanted = {f"{prefix}__{p}": d for p, d in _PORTS.items()}
    w = slot_ports(verilog_text, top, {**wanted, "irq": "output"}, "CSR master")
    for p, width in (("wdata", 32), ("rdata", 32), ("wstrb", 4), ("bresp", 2), ("rresp", 2)):
        if w[f"{prefix}__{p}"] != width:
            raise ValueError(f"{top}.{prefix}__{p} is {w[f'{prefix}__{p}']} bits, the CSR "
                             f"master needs {width}")
    aw = w[f"{prefix}__awaddr"]
    if w[f"{prefix}__araddr"] != aw or aw > 32:
        raise ValueError(f"{top}: AW/AR address widths differ or exceed 32 bits")
    ports = {f"{prefix}__{p}": p for p in _PORTS}
    ports["irq"] = "irq"
    return ModelSlot(module=CSR_MODULE, text=_module(aw), instance="csr", select=SELECT_PORT,
                     ports=ports,
                     drives=tuple(f"{prefix}__{p}" for p, d in _PORTS.items() if d == "input"),
                     wires=((BUSY, "busy", 1),), select_port="selected")


def csr_input(dut, handle):
    """Where a Python CSR master writes ``handle``: the top's ``ext_`` input on a top with the
    compiled master (which it deselects), else the signal itself."""
    return outside_input(dut, SELECT_PORT, handle)
