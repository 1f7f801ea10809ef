"""The power-failure campaign (``trainingcxl crash``, ``make crash``, docs/crash.md).

- :mod:`.campaign`: the command line and runner (progress, resume after a simulator death,
  report).
- :mod:`.tb`: the cocotb bench: reference run, crash images, recovery and replay of each point
  (:class:`~.tb.CrashParams`).
"""
