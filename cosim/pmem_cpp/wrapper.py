"""Verilog that puts the C++ PMEM model (``pmem_dpi.cpp``) on a design's AXI4 media port.

:func:`pmem_slot` is the :class:`cosim.model_top.ModelSlot` of the module
``trainingcxl_pmem_dpi`` on the AXI4 master port ``<prefix>_ar...`` of a design (Amaranth's
``m_axi`` port: ``m_axi__araddr``, ...): on every rising clock edge it calls the DPI-C function
``tcxl_pmem_edge`` with the port's values as the edge samples them and registers the values it
returns (non-blocking, so the design sees them after the edge, as it sees cocotb's writes);
``tcxl_pmem_reset`` runs when reset rises, and the model's outputs are held low while reset is
high (the Python model's channel engines drop valid and ready at that instant).

On the top :func:`cosim.model_top.model_top` builds (``cosim.build.device_build``), the input
``pmem_cpp`` chooses at run time who drives the signals the slave drives (``arready``,
``rdata``, ``bvalid``, ...): high (:class:`cosim.pmem_cpp.CppPmemModel` sets it), the C++
model; low (the initial value), the top's inputs ``ext_<prefix>_<name>``, which is where
:class:`cosim.pmem.PmemModel` (Python) writes. Either way the media port's signals are wires
of the top under their own names, so cocotb (and the boundary trace) reads the values the
design sees as ``dut.m_axi__rdata``. One simulator build serves both PMEM models.
"""
from __future__ import annotations

from pathlib import Path

from cosim.model_top import ModelSlot, slot_ports

__all__ = ["CPP_SOURCE", "PMEM_MODULE", "SELECT_PORT", "pmem_slot"]

CPP_SOURCE = Path(__file__).resolve().parent / "pmem_dpi.cpp"
PMEM_MODULE = "trainingcxl_pmem_dpi"
SELECT_PORT = "pmem_cpp"   # 1: the C++ model drives the media port, 0: the ext_ inputs do

# (name, direction seen from the master)
_MEDIA = (("awid", "out"), ("awaddr", "out"), ("awlen", "out"), ("awsize", "out"),
          ("awburst", "out"), ("awuser", "out"), ("awvalid", "out"), ("awready", "in"),
          ("wdata", "out"), ("wstrb", "out"), ("wlast", "out"), ("wvalid", "out"),
          ("wready", "in"),
          ("bid", "in"), ("bresp", "in"), ("bvalid", "in"), ("bready", "out"),
          ("arid", "out"), ("araddr", "out"), ("arlen", "out"), ("arsize", "out"),
          ("arburst", "out"), ("arvalid", "out"), ("arready", "in"),
          ("rid", "in"), ("rdata", "in"), ("rresp", "in"), ("rlast", "in"), ("ruser", "in"),
          ("rvalid", "in"), ("rready", "out"))


def _pmem_module(widths: dict) -> str:
    dw, sw = widths["wdata"], widths["wstrb"]
    w = {k: widths[k] for k in ("arid", "araddr", "arlen", "arsize", "arburst",
                                "awid", "awaddr", "awlen", "awsize", "awburst",
                                "rid", "rresp", "bid", "bresp")}
    if widths["rdata"] != dw or dw % 32 or not 8 <= dw <= 512 or sw * 8 != dw:
        raise ValueError(f"media data width {dw} (strobe {sw}, rdata {widths['rdata']}): the C++ "
                         "model takes 32..512-bit buses in 32-bit steps")
    if w["araddr"] > 64 or w["awaddr"] > 64 or max(w["arid"], w["awid"]) > 31:
        raise ValueError(f"media address/id widths {w} too wide for the C++ model")

    def rng(n):
        return f"[{n - 1}:0] " if n > 1 else ""

    return f"""
// The C++ PMEM model (cosim/pmem_cpp/pmem_dpi.cpp) on an AXI4 slave port.
module {PMEM_MODULE} (
    input  wire clk,
    input  wire rst,
    input  wire {rng(w['arid'])}arid,
    input  wire {rng(w['araddr'])}araddr,
    input  wire {rng(w['arlen'])}arlen,
    input  wire {rng(w['arsize'])}arsize,
    input  wire {rng(w['arburst'])}arburst,
    input  wire arvalid,
    output wire arready,
    input  wire {rng(w['awid'])}awid,
    input  wire {rng(w['awaddr'])}awaddr,
    input  wire {rng(w['awlen'])}awlen,
    input  wire {rng(w['awsize'])}awsize,
    input  wire {rng(w['awburst'])}awburst,
    input  wire awuser,
    input  wire awvalid,
    output wire awready,
    input  wire [{dw - 1}:0] wdata,
    input  wire [{sw - 1}:0] wstrb,
    input  wire wlast,
    input  wire wvalid,
    output wire wready,
    output wire {rng(w['rid'])}rid,
    output wire [{dw - 1}:0] rdata,
    output wire {rng(w['rresp'])}rresp,
    output wire rlast,
    output wire ruser,
    output wire rvalid,
    input  wire rready,
    output wire {rng(w['bid'])}bid,
    output wire {rng(w['bresp'])}bresp,
    output wire bvalid,
    input  wire bready
);
    import "DPI-C" function int tcxl_pmem_edge(
        input bit rst,
        input bit ar_valid, input int ar_id, input longint ar_addr, input int ar_len,
        input int ar_size, input int ar_burst,
        input bit aw_valid, input int aw_id, input longint aw_addr, input int aw_len,
        input int aw_size, input int aw_burst, input bit aw_user,
        input bit w_valid, input bit [{dw - 1}:0] w_data, input bit [{sw - 1}:0] w_strb,
        input bit w_last, input bit r_ready, input bit b_ready,
        output bit ar_ready, output bit aw_ready, output bit w_ready,
        output bit r_valid, output int r_id, output bit [{dw - 1}:0] r_data, output bit r_last,
        output int r_resp, output bit r_user,
        output bit b_valid, output int b_id, output int b_resp);
    import "DPI-C" function void tcxl_pmem_reset();

    // what the last edge returned (the DPI outputs), registered below (Verilator starts every
    // variable at zero)
    bit n_arready, n_awready, n_wready, n_rvalid, n_rlast, n_ruser, n_bvalid;
    /* verilator lint_off UNUSEDSIGNAL */  // the DPI passes 32-bit ints; only the low bits count
    int n_rid, n_rresp, n_bid, n_bresp;
    /* verilator lint_on UNUSEDSIGNAL */
    bit [{dw - 1}:0] n_rdata;
    reg q_arready, q_awready, q_wready, q_rvalid, q_rlast, q_ruser, q_bvalid;
    reg {rng(w['rid'])}q_rid;
    reg {rng(w['rresp'])}q_rresp;
    reg {rng(w['bid'])}q_bid;
    reg {rng(w['bresp'])}q_bresp;
    reg [{dw - 1}:0] q_rdata;

    always @(posedge clk) begin
        if (tcxl_pmem_edge(rst,
                arvalid, 32'(arid), 64'(araddr), 32'(arlen), 32'(arsize), 32'(arburst),
                awvalid, 32'(awid), 64'(awaddr), 32'(awlen), 32'(awsize), 32'(awburst), awuser,
                wvalid, wdata, wstrb, wlast, rready, bready,
                n_arready, n_awready, n_wready,
                n_rvalid, n_rid, n_rdata, n_rlast, n_rresp, n_ruser,
                n_bvalid, n_bid, n_bresp) != 0)
            $fatal(1, "C++ PMEM model: AXI protocol error (cosim.pmem_cpp.protocol_error())");
        q_arready <= n_arready;
        q_awready <= n_awready;
        q_wready <= n_wready;
        q_rvalid <= n_rvalid;
        q_rid <= n_rid[{w['rid'] - 1}:0];
        q_rdata <= n_rdata;
        q_rlast <= n_rlast;
        q_ruser <= n_ruser;
        q_rresp <= n_rresp[{w['rresp'] - 1}:0];
        q_bvalid <= n_bvalid;
        q_bid <= n_bid[{w['bid'] - 1}:0];
        q_bresp <= n_bresp[{w['bresp'] - 1}:0];
    end

    always @(posedge rst) tcxl_pmem_reset();

    assign arready = q_arready & ~rst;
    assign awready = q_awready & ~rst;
    assign wready = q_wready & ~rst;
    assign rvalid = q_rvalid & ~rst;
    assign bvalid = q_bvalid & ~rst;
    assign rid = q_rid;
    assign rdata = q_rdata;
    assign rlast = q_rlast;
    assign ruser = q_ruser;
    assign rresp = q_rresp;
    assign bid = q_bid;
    assign bresp = q_bresp;
endmodule
"""


def pmem_slot(verilog_text: str, top: str = "trainingcxl_device",
              prefix: str = "m_axi_") -> ModelSlot:
    """The C++ PMEM model on the AXI4 master port ``<prefix>_<name>`` of ``top``
    (:class:`cosim.model_top.ModelSlot`, selected by :data:`SELECT_PORT`)."""
    media = {f"{prefix}_{n}": n for n, _ in _MEDIA}
    direction = dict(_MEDIA)
    w = slot_ports(verilog_text, top, {s: f"{direction[n]}put" for s, n in media.items()},
                   "PMEM model")
    widths = {n: w[s] for s, n in media.items()}
    return ModelSlot(module=PMEM_MODULE, text=_pmem_module(widths), instance="pmem",
                     select=SELECT_PORT, ports=media,
                     drives=tuple(s for s, n in media.items() if direction[n] == "in"))
