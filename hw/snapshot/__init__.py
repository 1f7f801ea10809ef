"""MLP snapshot engine (docs/training.md section 9)."""
from .engine import SNAP_ID, SnapshotEngine, snap_capacity, snap_slot_bytes, start_layout

__all__ = ["SNAP_ID", "SnapshotEngine", "snap_capacity", "snap_slot_bytes", "start_layout"]
