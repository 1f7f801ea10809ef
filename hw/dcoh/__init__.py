"""CXL.mem device coherency engine (HDM-DB): docs/coherence.md."""
from .dcoh import DCOH, STATUS_PORTS, forward_status, status_members

__all__ = ["DCOH", "STATUS_PORTS", "forward_status", "status_members"]
