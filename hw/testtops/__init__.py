"""Bench-only tops: parts of the device wired for one bench, never part of the device itself.

- :mod:`.lookup_slice`: the gather engine behind the DCOH (``LookupSlice``).
- :mod:`.dcoh`: the DCOH alone with a device request port (``DcohTestTop``).

The FPGA harness (``hw.fpga.harness``) and the formal harnesses (``hw.formal``) stay with their
flows.
"""
