"""TrainingCXL applications: the ``trainingcxl`` command and the jobs it runs.

One folder or module per job (Glasgow's applet split: the simulator-side bench next to its host
side and its command line):

- :mod:`.cli`: the ``trainingcxl`` console script, one subcommand per job.
- :mod:`.train`: the training job (``make demo``): RTL device adapter, cocotb bench, report.
- :mod:`.crash`: the power-failure campaign (``make crash``).
- :mod:`.stress`: the DCOH random stress (``make stress``).
- :mod:`.bench`: the benchmarks (``make bench``).
- :mod:`.lookup_demo`: the LOOKUP-only demo (``make lookup-demo``).
- :mod:`.study`: the relaxed-ordering study on the golden model (``make study``).
- :mod:`.data`, :mod:`.compare`: click-log and trace-compare commands.
- :mod:`.synth`, :mod:`.formal`: drivers of the FPGA and formal flows (their harnesses stay in
  ``hw/fpga`` and ``hw/formal``).
- :mod:`.regression`, :mod:`.check_junit`: the regression (``make test``) and its guard.
- :mod:`.shade`: importance-aware sample caching and sampling for the data path (``make shade``).
- :mod:`.system`: the system model of a training step (``make system``).

Dependency direction: this package imports ``hw``, ``sw_model`` and ``cosim``; none of them
imports it.
"""
