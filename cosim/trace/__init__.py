"""Trace record and compare (docs/traces.md).

- :mod:`.boundary`: a passive recorder of stream and AXI handshakes with cycle numbers
  (``TraceRecorder``) and the line-by-line comparison of two recordings (``first_difference``).
- :mod:`.device`: the full device's boundary trace (``record_device_trace``).
- :mod:`.action_log`: the host action log the golden model replays.
- :mod:`.compare`: RTL trace against model trace by the rules that hold (the command line is
  ``trainingcxl compare``).
"""
