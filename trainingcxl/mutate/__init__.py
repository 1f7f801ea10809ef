"""Mutation testing (docs/verification.md): :mod:`.hw` mutates the RTL's netlist (Yosys
``mutate``, mcy-style) and runs the cosim benches covering each mutant; :mod:`.model` mutates the
golden model (``sw_model/``) with mutmut and runs the model tests against each mutant."""
