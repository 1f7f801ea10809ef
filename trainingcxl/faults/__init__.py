"""Media-fault campaign (``trainingcxl faults``, docs/faults.md)."""
