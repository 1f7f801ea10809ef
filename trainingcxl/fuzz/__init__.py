"""``trainingcxl fuzz``: descriptors, CSR sequences and CXL.mem messages fuzzed against the RTL
with the golden model as the oracle (docs/faults.md)."""
