"""Undo logger (docs/training.md section 5)."""
from .layouts import ensure_done_layout, log_line_layout, log_row_layout
from .logger import UndoLogger

__all__ = ["UndoLogger", "log_row_layout", "log_line_layout", "ensure_done_layout"]
