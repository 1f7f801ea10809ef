"""Formal verification of the DCOH (docs/coherence.md, architecture 5.3) with SymbiYosys.

- :mod:`.run`: ``python -m trainingcxl.formal`` (``make formal``): RTLIL, ``.sby`` files,
  ``yowasp-sby`` runs (BMC, k-induction, cover), a result table, counterexample summaries and
  ``build/formal/report.json``.
- :mod:`.harness`: the DCOH under an abstract CXL.mem host, an abstract media responder and
  arbitrary engines, with the rule-1/5/6/7 properties.
- :mod:`.invariants`: the helper invariants that let k-induction close.
- :mod:`.dut`: builds the DCOH for the proof (register models of its FIFOs and memories, named
  access to its internals) and its deliberately broken variants.
- :mod:`.models`: the register models and the miter that checks them against the library.
- :mod:`.props`: named properties and free values.
- :mod:`.toy`: a small design that proves (and, broken, fails) the flow end to end.
"""
