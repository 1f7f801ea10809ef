"""cocotb side of the co-simulation: Verilator build/run helper (``cosim.build``), PMEM model
(``cosim.pmem``), Amaranth stream drivers (``cosim.streams``) and the benches."""
