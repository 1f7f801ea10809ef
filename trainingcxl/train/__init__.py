"""The training job (``trainingcxl train``, ``make demo``): DLRM training with the RTL in the loop.

- :mod:`.job`: the command line and the host side: builds the simulator, runs the bench, the
  golden-model reference runs and the report.
- :mod:`.tb`: the cocotb bench inside the simulator (:class:`~.tb.TrainParams`).
- :mod:`.rtl_device`: the RTL device adapter the trainer drives (``RtlDevice``), with its
  golden-model twin.
- :mod:`.report`: summary, ``summary.json``, ``report.md`` and plots.
"""
