"""CXL.mem device coherency engine (HDM-DB): docs/coherence.md."""
from .dcoh import DCOH

__all__ = ["DCOH"]
