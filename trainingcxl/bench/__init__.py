"""Benchmarks (``trainingcxl bench``, ``make bench``, docs/benchmarks.md): each prints a table
and writes JSON.

- :mod:`.run`: all benchmarks, each section a task (serial, or on a Dask cluster).
- :mod:`.gather_reduce` + :mod:`.gather_reduce_tb`: LOOKUP throughput and media-port use.
- :mod:`.dcoh` + :mod:`.dcoh_tb`: DCOH host read latency and request rate.
- :mod:`.training` + :mod:`.training_tb`: one training step's critical path by logging mode.
"""
