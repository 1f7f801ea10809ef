"""Mutation testing (issue #17 item 3, docs/verification.md): ``hw`` mutates the RTL's netlist
(Yosys ``mutate``, mcy-style) and runs the cosim benches covering each mutant."""
