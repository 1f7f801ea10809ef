"""The LOOKUP-only demo (``trainingcxl lookup-demo``, ``make lookup-demo``).

- :mod:`.job`: the command line and summary.
- :mod:`.tb`: the cocotb bench (:class:`~.tb.LookupDemoParams`).
"""
