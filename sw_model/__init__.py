"""Golden model of the device (pure Python + numpy).

Imports only ``hw.config``, ``hw.encodings`` and ``hw.cxl_encodings`` from the hardware tree
(parameters and encodings, no behaviour), never Amaranth or cocotb. Modules: ``fixedpoint``
(number format), ``memory`` (sparse device memory image), ``device`` (LOOKUP semantics of
docs/lookup.md), ``workload`` (seeded workload generation and layout), ``coherence`` (DCOH
reference of docs/coherence.md: expected answers, host permissions, data-value checker),
``training`` (training state of docs/training.md: UPDATE, undo log with recovery epoch, COMMIT,
recovery, rings; also reads CSR byte addresses from the generated ``hw/csr/regmap.json`` as data).
"""
