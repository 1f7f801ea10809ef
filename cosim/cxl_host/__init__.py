"""Host model for the CXL.mem (HDM-DB) channels of the DCOH: a caching host with real MESI state.

Layers (the cocotbext-axi split: channels, protocol model, functional model), one module each:

* :mod:`.protocol`: request kinds, payloads, transaction/snoop records, knobs, the violation
  record, the coherence reference.
* :mod:`.core`: :class:`HostCore`, pure Python (no cocotb), with its protocol sides in
  :mod:`.requests`, :mod:`.responses` and :mod:`.snoops`: per-line MESI state and data for any number of
  lines, the host half of the CXL 3.1 protocol (legal requests from each "buried" state, BISnp
  answers, BIConflict handshakes), adversarial per-channel delays, seeded random traffic, and
  checks of every response against the coherence reference (``sw_model.coherence``) and the
  boundary-observable rules 5, 6, 7 of architecture 5.3. Time is a cycle number the caller
  supplies; messages go out through per-channel queues (:attr:`HostCore.out`) and come in
  through :meth:`HostCore.on_ndr` / :meth:`on_drs` / :meth:`on_bisnp`. Unit tests drive it
  against a fake device (tests/model/test_cxl_host.py).
* :mod:`.channels`: :class:`ChannelSet`, the cocotb per-cycle channel loop.
* :mod:`.host`: :class:`CxlHost`, the cocotb adapter: it drives the six channel ports of a DUT (``m2s_req``,
  ``m2s_rwd``, ``m2s_birsp`` in; ``s2m_ndr``, ``s2m_drs``, ``s2m_bisnp`` out; payloads packed
  with ``cosim.streams.PayloadCodec`` and ``hw.cxl.messages.message_layout``) and offers
  awaitable directed operations and ``run_random``.

Protocol choices (docs/coherence.md is the contract; these are the host-side details):

* One outstanding host transaction (Req or MemWr/MemWrPtl) per line; tags are 16 bit, unique
  among outstanding transactions, allocated round robin so a stale response is caught as an
  unknown tag for a long time.
* BIConflict is its own M2S RwD transaction: it carries the conflicting line's address and a
  *fresh* tag from the same pool (CXL gives every M2S transaction its own tag, which the
  subordinate reflects in its response; the DCOH answers BI-ConflictAck with the BIConflict's
  tag). ``HostKnobs.conflict_tag = "req"`` instead reuses the pending Req's tag (the Ack is then
  told apart from the Req's Cmp by opcode), so both readings of the spec can be exercised.
* A BISnp that meets a pending Req to its line (issued, even if not yet transferred) gets a
  BIConflict. If the Req's Cmp arrives before the BI-ConflictAck (late conflict), the host waits
  for the Req to complete (Cmp and, for reads, MemData) and answers the snoop from its new state;
  if the Ack comes first (early conflict), it answers from its old state at once and the Req is
  served later. A BISnp that meets a pending write waits for the write's Cmp (no BIConflict:
  RwD is never blocked), then is answered from the state after the write.
* A dirty line is written back with MemWr (MemWrPtl when only some bytes are dirty) before the
  BIRsp, and the BIRsp is sent only after that write's Cmp.
* Host writes to media carry cached values and are not reported to the value checker; CPU
  stores are (as writes at one cycle), and so are uncached writes from I (over [sent, Cmp]).
"""
from .channels import ChannelSet, bursty_pauses, fast_getter
from .core import HostCore
from .host import CxlHost
from .protocol import (
    ALL_BE, CPU_KINDS, DEFAULT_MIX, IN_CHANNELS, LINE_BYTES, OUT_CHANNELS, REQ_KINDS, Conflict,
    HostKnobs, HostViolation, HostViolationError, IllegalHostOp, Reference, Snoop, Txn,
)

__all__ = ["HostCore", "HostKnobs", "Txn", "Snoop", "Conflict", "HostViolation", "IllegalHostOp",
           "HostViolationError", "REQ_KINDS", "CPU_KINDS", "DEFAULT_MIX", "CxlHost", "ChannelSet",
           "bursty_pauses", "fast_getter", "Reference", "ALL_BE", "LINE_BYTES", "IN_CHANNELS", "OUT_CHANNELS"]
