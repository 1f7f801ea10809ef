"""Verilog that puts the compiled CXL.mem host (``host_dpi.cpp``) on a design's host channels.

:func:`host_slot` is the :class:`cosim.model_top.ModelSlot` of the module
``trainingcxl_host_dpi``: on every rising clock edge it calls the DPI-C function
``tcxl_host_edge`` with the channels' values as the edge samples them and registers what it
returns (non-blocking, so the design sees them after the edge, as it sees cocotb's writes). It
drives ``m2s_req`` and ``m2s_rwd`` (valid, payload), ``m2s_birsp`` (never valid) and the S2M
readies (``s2m_bisnp`` never ready), all low while reset is high, and has an output ``busy``
(a wire ``host_cpp_busy`` of the top) that is high while a job is running. The NDR and DRS
readies are its input ``attach`` (the top input ``host_cpp_attach``, which Python writes), so
attaching and detaching take effect at once, as the Python host's writes of the readies do;
the engine takes and checks answers only on edges that sample it high. With the select
input ``host_cpp`` low, the top's ``ext_`` inputs drive those signals instead: that is where
the Python host (:mod:`cosim.cxl_host`) writes on this top.
"""
from __future__ import annotations

from pathlib import Path

from cosim.model_top import ModelSlot, outside_input, slot_ports

__all__ = ["CPP_SOURCE", "HOST_MODULE", "SELECT_PORT", "BUSY", "ATTACH", "host_slot",
           "host_input"]

CPP_SOURCE = Path(__file__).resolve().parent / "host_dpi.cpp"
HOST_MODULE = "trainingcxl_host_dpi"
SELECT_PORT = "host_cpp"      # 1: the compiled host drives the channels, 0: the ext_ inputs do
BUSY = "host_cpp_busy"        # wire of the top: a job of the compiled host is running
ATTACH = "host_cpp_attach"    # input of the top: the compiled host's S2M readies

# module port -> (design signal, the design's direction)
_CHANNELS = {
    "req_valid": ("m2s_req__valid", "input"), "req_payload": ("m2s_req__payload", "input"),
    "req_ready": ("m2s_req__ready", "output"),
    "rwd_valid": ("m2s_rwd__valid", "input"), "rwd_payload": ("m2s_rwd__payload", "input"),
    "rwd_ready": ("m2s_rwd__ready", "output"),
    "birsp_valid": ("m2s_birsp__valid", "input"),
    "birsp_payload": ("m2s_birsp__payload", "input"),
    "ndr_valid": ("s2m_ndr__valid", "output"), "ndr_payload": ("s2m_ndr__payload", "output"),
    "ndr_ready": ("s2m_ndr__ready", "input"),
    "drs_valid": ("s2m_drs__valid", "output"), "drs_payload": ("s2m_drs__payload", "output"),
    "drs_ready": ("s2m_drs__ready", "input"),
    "bisnp_valid": ("s2m_bisnp__valid", "output"),
    "bisnp_ready": ("s2m_bisnp__ready", "input"),
}


def _module(w: dict) -> str:
    q, r, n, d, b = (w[k] for k in ("req_payload", "rwd_payload", "ndr_payload", "drs_payload",
                                    "birsp_payload"))
    return f"""
// The compiled CXL.mem host (cosim/host_cpp/host_dpi.cpp) on the host channels.
module {HOST_MODULE} (
    input  wire clk,
    input  wire rst,
    input  wire attach,
    output wire req_valid,
    output wire [{q - 1}:0] req_payload,
    input  wire req_ready,
    output wire rwd_valid,
    output wire [{r - 1}:0] rwd_payload,
    input  wire rwd_ready,
    output wire birsp_valid,
    output wire [{b - 1}:0] birsp_payload,
    input  wire ndr_valid,
    input  wire [{n - 1}:0] ndr_payload,
    output wire ndr_ready,
    input  wire drs_valid,
    input  wire [{d - 1}:0] drs_payload,
    output wire drs_ready,
    input  wire bisnp_valid,
    output wire bisnp_ready,
    output wire busy
);
    import "DPI-C" function int tcxl_host_edge(
        input bit rst, input bit attach, input bit req_ready, input bit rwd_ready,
        input bit ndr_valid, input bit [{n - 1}:0] ndr_payload,
        input bit drs_valid, input bit [{d - 1}:0] drs_payload, input bit bisnp_valid,
        output bit req_valid, output bit [{q - 1}:0] req_payload,
        output bit rwd_valid, output bit [{r - 1}:0] rwd_payload,
        output bit busy);

    bit n_req_valid, n_rwd_valid, n_busy;
    bit [{q - 1}:0] n_req_payload;
    bit [{r - 1}:0] n_rwd_payload;
    reg q_req_valid, q_rwd_valid, q_busy;
    reg [{q - 1}:0] q_req_payload;
    reg [{r - 1}:0] q_rwd_payload;

    always @(posedge clk) begin
        void'(tcxl_host_edge(rst, attach, req_ready, rwd_ready, ndr_valid, ndr_payload, drs_valid,
                             drs_payload, bisnp_valid, n_req_valid, n_req_payload,
                             n_rwd_valid, n_rwd_payload, n_busy));
        q_req_valid <= n_req_valid;
        q_req_payload <= n_req_payload;
        q_rwd_valid <= n_rwd_valid;
        q_rwd_payload <= n_rwd_payload;
        q_busy <= n_busy;
    end

    assign req_valid = q_req_valid & ~rst;
    assign req_payload = q_req_payload;
    assign rwd_valid = q_rwd_valid & ~rst;
    assign rwd_payload = q_rwd_payload;
    assign birsp_valid = 1'b0;
    assign birsp_payload = {b}'d0;
    assign ndr_ready = attach & ~rst;
    assign drs_ready = attach & ~rst;
    assign bisnp_ready = 1'b0;
    assign busy = q_busy;
endmodule
"""


def host_slot(verilog_text: str, top: str = "trainingcxl_device") -> ModelSlot:
    """The compiled host on the six CXL.mem channels of ``top`` (selected by ``host_cpp``)."""
    w = slot_ports(verilog_text, top, dict(_CHANNELS.values()), "CXL.mem host")
    widths = {port: w[sig] for port, (sig, _) in _CHANNELS.items()}
    ports = {sig: port for port, (sig, _) in _CHANNELS.items()}
    return ModelSlot(module=HOST_MODULE, text=_module(widths), instance="host",
                     select=SELECT_PORT, ports=ports,
                     drives=tuple(sig for sig, d in _CHANNELS.values() if d == "input"),
                     wires=((BUSY, "busy", 1),), inputs=((ATTACH, "attach", 1),))


def host_input(dut, handle):
    """Where a Python host writes ``handle``: the top's ``ext_`` input on a top with the
    compiled host (which it deselects), else the signal itself."""
    return outside_input(dut, SELECT_PORT, handle)
