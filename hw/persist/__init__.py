"""Persist engine: superblock, COMMIT and recovery (docs/training.md section 6)."""
from .engine import PERSIST_ID, PersistEngine

__all__ = ["PERSIST_ID", "PersistEngine"]
