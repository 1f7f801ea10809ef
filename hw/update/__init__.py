"""UPDATE engine: in-place SGD update of embedding rows (docs/training.md section 4)."""
from .engine import UpdateEngine

__all__ = ["UpdateEngine"]
