"""Reusable verification components for cocotb + Verilator (no tests, no applications here).

- :mod:`.build`: Verilator/Icarus builds (content-hash cache) and guarded cocotb runs.
- :mod:`.params`: one typed, serialized parameter object per simulator run.
- :mod:`.streams`: Amaranth stream agents (source, sink, payload codec).
- :mod:`.pmem`: the AXI4 PMEM model; :mod:`.powerfail`: crash images of it.
- :mod:`.csr`: the register map by name and the AXI4-Lite CSR master.
- :mod:`.cxl_host`: the CXL.mem caching host (pure transaction core + cocotb channel adapter).
- :mod:`.device_driver`: the host driver of the device (CSRs, rings, doorbells, recovery).
- :mod:`.coherence_check`: the coherence scoreboard at the DCOH boundary.
- :mod:`.training_workload`: seeded multi-batch training workloads for the device.
- :mod:`.tb`: bench environments (``DeviceTB``, ``DcohTB``, ``GatherTB``) and their shared
  :class:`~.tb.config.BenchConfig`.
- :mod:`.trace`: boundary trace record and compare.
"""
