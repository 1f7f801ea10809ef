"""Near-data gather + sum-pool engine (LOOKUP). See docs/lookup.md for the exact semantics."""
from .engine import GatherReduce

__all__ = ["GatherReduce"]
