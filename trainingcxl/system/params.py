"""Every parameter of the system model except the device's cycle formulas, with its source.

The values are fixed here, before any comparison is run, and nothing in the model tunes them.
``kind`` says how firm a value is: ``datasheet``/``spec`` (a vendor or standard figure),
``paper`` (a measurement published in a paper), ``derived`` (computed from other sourced
figures, the derivation in ``source``), ``assumption`` (no source found offline; the tornado
chart shows how much the result depends on it).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Param", "PARAMS", "CLOCKS", "Params", "defaults"]


@dataclass(frozen=True)
class Param:
    name: str
    value: float
    unit: str
    kind: str
    source: str
    # varied by the tornado chart (clock scenarios and counts are not)
    sensitivity: bool = True


IZR = "Izraelevitz et al., Basic Performance Measurements of the Intel Optane DC PMM, arXiv:1903.05714 (2019)"
YANG = "Yang et al., An Empirical Guide to the Behavior and Use of Scalable Persistent Memory, FAST '20"

_P = [
    # ---- persistent memory (host DIMMs for the baselines; the same media behind the device) --
    Param("pmem_read_latency_ns", 305, "ns", "paper",
          f"{IZR}: random 64-B load latency of Optane DC PMM (App Direct)"),
    Param("pmem_read_bw", 39.4e9, "B/s", "paper",
          f"{IZR}: max read bandwidth of 6 interleaved DIMMs (one socket)"),
    Param("pmem_write_bw", 13.9e9, "B/s", "paper",
          f"{IZR}: max write bandwidth of 6 interleaved DIMMs (one socket)"),
    Param("pmem_access_granule", 256, "B", "paper",
          f"{YANG}: internal access granularity (XPLine) 256 B; smaller random accesses get "
          "proportionally less bandwidth (read/write amplification)", sensitivity=False),
    Param("pmem_persist_latency_ns", 90, "ns", "paper",
          f"{IZR}: write + fence (clwb/ntstore + sfence) latency about 90 ns (ADR domain)"),
    Param("pmem_dimm_power_w", 15.0, "W", "datasheet",
          "Intel Optane DC PMM 100 series: configurable average power budget 12-18 W per "
          "module (midpoint), drawn while the media is busy"),
    Param("pmem_dimm_bytes", 256e9, "B", "datasheet",
          "Intel Optane DC PMM 100 series modules of 128, 256 or 512 GB (256 GB taken); a "
          "device holds pmem_dimms of them", sensitivity=False),
    Param("pmem_dimms", 6, "", "paper", f"{IZR}: 6 DIMMs per socket (one per channel)",
          sensitivity=False),
    # ---- host DRAM (DRAM-only reference) ----------------------------------------------------
    Param("dram_latency_ns", 81, "ns", "paper", f"{IZR}: local DRAM random load latency"),
    Param("dram_bw", 140.8e9, "B/s", "spec",
          "JEDEC DDR4-2933 (Cascade Lake 1 DPC): 23.47 GB/s per channel x 6 channels"),
    Param("dram_energy_pj_bit", 20.0, "pJ/bit", "paper",
          "Horowitz, Computing's energy problem, ISSCC 2014: DRAM 1.3-2.6 nJ per 64-bit "
          "access (20-40 pJ/bit; low end)"),
    # ---- host CPU -----------------------------------------------------------------------------
    Param("cpu_cores", 16, "", "datasheet",
          "Intel Xeon Gold 6242 (Cascade Lake-SP, Optane DCPMM platform): 16 cores, 2.8 GHz",
          sensitivity=False),
    Param("cpu_active_w", 150.0, "W", "datasheet", "Intel Xeon Gold 6242 TDP 150 W"),
    Param("cpu_idle_w", 45.0, "W", "assumption",
          "package power of an idle-waiting host (polling one core); about 30 % of TDP"),
    Param("cpu_misses_per_core", 10, "", "datasheet",
          "Intel 64 and IA-32 Optimization Reference Manual: 10 L1D fill buffers per core "
          "(Skylake-SP/Cascade Lake): outstanding cache-line misses per core"),
    Param("cpu_ns_per_row", 5.0, "ns", "assumption",
          "CPU instructions per gathered/updated row (index load, address, pool/axpy of "
          "dim floats with AVX-512) per core; memory stalls are modelled separately"),
    # ---- GPU ----------------------------------------------------------------------------------
    Param("gpu_flops", 19.5e12, "FLOP/s", "datasheet", "NVIDIA A100 PCIe: 19.5 TFLOPS FP32"),
    Param("gpu_efficiency", 0.6, "", "assumption",
          "fraction of FP32 peak the DLRM MLP GEMMs reach (batch 2048-8192, layers 256-1024)"),
    Param("gpu_active_w", 250.0, "W", "datasheet", "NVIDIA A100 PCIe: max board power 250 W"),
    Param("gpu_idle_w", 50.0, "W", "assumption", "A100 board power while waiting (20 % of max)"),
    # ---- links --------------------------------------------------------------------------------
    Param("pcie_bw", 31.5e9 * 256 / 280, "B/s", "derived",
          "PCIe 4.0 x16 (A100): 16 GT/s x 16 x 128b/130b = 31.5 GB/s per direction, times "
          "256/(256+24) for 256-B payload TLPs"),
    Param("cxl_bw", 63.0e9 * 0.75, "B/s", "derived",
          "CXL 2.0 x16 on the PCIe 5.0 PHY: 32 GT/s x 16 x 128b/130b = 63 GB/s per direction, "
          "times about 0.75 payload efficiency of 68-B CXL.mem flits (64 B data per 4 slots "
          "plus header slots)"),
    Param("cxl_latency_ns", 170, "ns", "paper",
          "Li et al., Pond: CXL-Based Memory Pooling Systems for Cloud Platforms, ASPLOS '23: "
          "CXL adds 70-90 ns to a local load (x8 direct); round trip host-device about 170 ns"),
    Param("link_pj_bit", 5.0, "pJ/bit", "assumption",
          "PCIe 5.0 / CXL SerDes energy, 4-7 pJ/bit in published PHY figures (both ends)"),
    Param("switch_latency_ns", 100, "ns", "assumption",
          "one CXL 2.0 switch hop (store-and-forward of a 68-B flit plus arbitration)"),
    # ---- the TrainingCXL device -----------------------------------------------------------
    Param("device_logic_w", 10.0, "W", "assumption",
          "near-data engines + CXL controller while busy (FPGA or ASIC), excluding media"),
    Param("device_idle_w", 3.0, "W", "assumption", "device logic while idle"),
    Param("log_buffer_lines", 1024, "lines", "spec",
          "hw/config.py DeviceConfig.log_buffer_lines (the RTL's undo-record buffer)",
          sensitivity=False),
    Param("update_coalesced", 0, "", "spec",
          "0: the RTL's UPDATE writes a row once per (bag, row) item (hw/update/engine.py); "
          "1: a what-if engine that coalesces gradients and writes each distinct row once",
          sensitivity=False),
    Param("staging_dram", 0, "", "spec",
          "0: staging (index lists, outputs, gradients, MLP source) in the device's one media "
          "as in the RTL; 1: a what-if device DRAM for staging", sensitivity=False),
    Param("max_reads", 256, "", "spec", "hw/config.py DeviceConfig.max_reads", sensitivity=False),
    Param("upd_rows", 1024, "", "spec", "hw/config.py DeviceConfig.upd_rows", sensitivity=False),
    # ---- baselines' failure tolerance ---------------------------------------------------------
    Param("ckpt_interval_batches", 1000, "batches", "assumption",
          "periodic-checkpoint baseline: whole tables + MLP every N batches (Check-N-Run, "
          "NSDI '22, checkpoints at intervals of tens of minutes)"),
]

PARAMS: dict[str, Param] = {p.name: p for p in _P}

# device clock scenarios
CLOCKS: dict[str, Param] = {
    "fpga": Param("clock_hz", 41.9e6, "Hz", "measured",
                  "docs/fpga.md (Ring checks registered, write grant in the cycle): nextpnr's "
                  "estimated Fmax after placement of the full device, `fpga-ecp5` configuration, "
                  "on LFE5UM5G-85F speed 8, nextpnr seed 1 (measured 2026-12-07 on 5fc5941's hw, "
                  "the hw the RTL cycle data were measured on); a placement estimate: the device "
                  "is not routed and no routed Fmax is measured; two placements of one logic "
                  "(3985a97, 42a38f9) gave 40.7 and 35.4 MHz: one placement varies by about "
                  "15 %",
                  sensitivity=False),
    "fpga-target": Param("clock_hz", 100e6, "Hz", "spec",
                         "docs/fpga.md: the FPGA timing target (100 MHz, not met)",
                         sensitivity=False),
    "asic": Param("clock_hz", 1.0e9, "Hz", "derived",
                  "ASIC-class: a 64-B-per-cycle datapath at 1 GHz carries 64 GB/s, the rate of "
                  "a CXL 2.0 x16 link (63 GB/s per direction, PCIe 5.0 PHY); 1 GHz is the "
                  "usual core clock of PCIe 5.0 controllers with a 512-bit data path",
                  sensitivity=False),
}


class Params(dict):
    """name -> value, with :meth:`scaled` for sensitivity runs."""

    def scaled(self, name: str, factor: float) -> "Params":
        if name not in self:
            raise KeyError(f"unknown parameter {name!r}")
        out = Params(self)
        out[name] = self[name] * factor
        return out


def defaults(clock: str = "asic") -> Params:
    if clock not in CLOCKS:
        raise ValueError(f"clock scenario must be one of {sorted(CLOCKS)}, got {clock!r}")
    p = Params({k: v.value for k, v in PARAMS.items()})
    p["clock_hz"] = CLOCKS[clock].value
    return p


def with_param(p: Param, value) -> Param:
    return replace(p, value=value)
