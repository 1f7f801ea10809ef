"""Golden model of the device (pure Python + numpy).

Imports only ``hw.config`` and ``hw.encodings`` from the hardware tree, never Amaranth or cocotb.
Modules: ``fixedpoint`` (number format), ``memory`` (sparse device memory image), ``device``
(LOOKUP semantics of docs/lookup.md), ``workload`` (seeded workload generation and layout).
"""
