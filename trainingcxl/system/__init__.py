"""System model of one DLRM training step: TrainingCXL device against PMEM- and DRAM-based
baselines, with device time from cycle formulas fitted to RTL measurements (docs/system.md)."""
