"""The DCOH random stress (``trainingcxl stress``, ``make stress``).

- :mod:`.job`: the command line: builds the DCOH test top, runs the bench, prints and writes
  the report.
- :mod:`.tb`: the cocotb bench (:class:`~.tb.StressParams`).
"""
