"""Device request port (architecture 3.2): line-granular memory requests with ids.

Four valid/ready streams, seen from the requester (an engine) side:

- ``rd_req``  (out): ``id``, ``op`` (:data:`RD_CUR` / :data:`RD_OWN`), ``addr`` (line address =
  byte address >> 6).
- ``rd_resp`` (in):  ``id``, ``err`` (media error: data not trustworthy), ``data`` (64 B line,
  byte 0 in bits 7:0).
- ``wr_req``  (out): ``id``, ``addr`` (line address), ``be`` (64 byte enables), ``data``.
- ``wr_resp`` (in):  ``id``, ``err``. A write is persistent once its ``wr_resp`` is received.

The media side of the DCOH (``DeviceRequestSignature(addr_bits, poison=True)``, the DCOH's
``mem`` port and MediaAXI's ``port``) adds one bit each way, kept per line by the media
(docs/coherence.md, "Poison"): ``wr_req.poison`` (write the line as poisoned) and
``rd_resp.poison`` (the line is poisoned). The engines' port has neither: the DCOH folds a
poisoned line into ``rd_resp.err``.

Ordering: responses with the same id return in request order; responses with different ids may
return in any order, so a requester must route by id. A requester keeps every response stream it
has requests outstanding on able to make progress (no dependency of ``rd_resp.ready`` on a later
request), which the arbitration in front of a shared port relies on.
"""
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .config import LINE_BYTES

__all__ = ["ID_BITS", "RD_CUR", "RD_OWN", "DeviceRequestSignature", "rd_req_layout",
           "rd_resp_layout", "wr_req_layout", "wr_resp_layout"]

ID_BITS = 4
RD_CUR = 0
RD_OWN = 1
LINE_BITS = LINE_BYTES * 8


def line_addr_bits(addr_bits):
    return addr_bits - 6


def rd_req_layout(addr_bits):
    return data.StructLayout({"id": ID_BITS, "op": 1, "addr": line_addr_bits(addr_bits)})


def rd_resp_layout(poison=False):
    return data.StructLayout({"id": ID_BITS, "err": 1, "data": LINE_BITS,
                              **({"poison": 1} if poison else {})})


def wr_req_layout(addr_bits, poison=False):
    return data.StructLayout({"id": ID_BITS, "addr": line_addr_bits(addr_bits),
                              "be": LINE_BYTES, "data": LINE_BITS,
                              **({"poison": 1} if poison else {})})


def wr_resp_layout():
    return data.StructLayout({"id": ID_BITS, "err": 1})


class DeviceRequestSignature(wiring.Signature):
    """Requester-side signature of the device request port for ``addr_bits``-bit byte addresses;
    ``poison=True``: the media side's variant with ``wr_req.poison`` and ``rd_resp.poison``
    (module docstring)."""

    def __init__(self, addr_bits, *, poison=False):
        self.addr_bits = addr_bits
        self.poison = bool(poison)
        super().__init__({
            "rd_req": Out(stream.Signature(rd_req_layout(addr_bits))),
            "rd_resp": In(stream.Signature(rd_resp_layout(self.poison))),
            "wr_req": Out(stream.Signature(wr_req_layout(addr_bits, self.poison))),
            "wr_resp": In(stream.Signature(wr_resp_layout())),
        })

    def __eq__(self, other):
        return (isinstance(other, DeviceRequestSignature) and other.addr_bits == self.addr_bits
                and other.poison == self.poison)

    def __repr__(self):
        return (f"DeviceRequestSignature(addr_bits={self.addr_bits}"
                + (", poison=True)" if self.poison else ")"))
