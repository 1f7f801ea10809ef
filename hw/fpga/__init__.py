"""FPGA prototyping flow: synthesis harness, Yosys + nextpnr runs, constraints (docs/fpga.md)."""
