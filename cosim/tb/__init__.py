"""Bench environments: one TB class per device top, each wiring drivers, models and checkers
around the DUT (``tb = TB(dut); await tb.reset()``), all configured by one
:class:`~cosim.tb.config.BenchConfig`.

- :mod:`.config`: :class:`BenchConfig`, the shared bench configuration.
- :mod:`.device`: the full device top in lock-step with the golden model (``DeviceTB``).
- :mod:`.dcoh`: the DCOH test top with the caching host, device agent and scoreboards (``DcohTB``).
- :mod:`.gather`: the LOOKUP slice against the golden model (``GatherTB``).
"""
