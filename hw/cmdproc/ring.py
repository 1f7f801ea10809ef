"""RingRegisters: the command/completion ring configuration, indices and doorbell checks."""
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import DeviceError
from .errors import error_event_layout

__all__ = ["RingRegisters", "RING_REGS", "MAX_RING"]

# ring registers the processor owns (value in, restore out)
RING_REGS = ("cmd_base_lo", "cmd_base_hi", "cmd_size", "cpl_base_lo", "cpl_base_hi", "cmd_tail")
MAX_RING = 65536


def checked_csr_addr(csr_addr: dict) -> dict:
    """A copy of ``csr_addr``; ``KeyError`` if it lacks a register of ``RING_REGS`` or
    ``"control"``."""
    missing = [r for r in (*RING_REGS, "control") if r not in csr_addr]
    if missing:
        raise KeyError(f"csr_addr has no address for {missing!r}")
    return dict(csr_addr)


class RingRegisters(wiring.Component):
    """The accepted ring configuration and the ring indices (docs/training.md sections 1-3).

    Ring CSRs arrive as the register block's values plus a one-cycle ``<r>_swmod`` pulse per
    software write; the new value is sampled the cycle after the pulse and either accepted or
    written back to the previous value (``<r>_we``/``<r>_next``, same cycle):

    - a configuration register (base, size) while ``busy`` or a descriptor is pending: refused,
      ``CSR_BUSY`` with the register's CSR address; else accepted, and head, tail and sequence
      number restart at 0 (``cmd_tail`` written back to 0);
    - ``cmd_tail`` (the doorbell): checked in order (not ``ready``: NOT_READY; ring size not a
      power of two in 2..65536 or a ring not 64 B aligned inside the staging region:
      RING_CONFIG; tail >= size: DOORBELL_RANGE; more new descriptors than free entries:
      RING_OVERFLOW); a refused value is written back.

    ``recover_req`` passes to ``recover`` only while nothing executes or is pending and the
    persist engine is idle, else CSR_BUSY with the CONTROL address.

    Parameters
    ----------
    cfg : DeviceConfig
        The staging region (``staging_base``, ``staging_size``).
    csr_addr : dict
        CSR byte address of each register of ``RING_REGS`` and of ``"control"`` (error values).

    Members
    -------
    <r>, <r>_swmod, <r>_next, <r>_we : In(32), In(1), Out(32), Out(1)
        For each r in ``RING_REGS``.
    ready : In(1)
        The device is ready (a recovery has completed).
    executing : In(1)
        A descriptor is executing.
    persist_busy : In(1)
        The persist engine is busy (a RECOVER is refused).
    recover_req : In(1), recover : Out(1)
        CONTROL.RECOVER pulse, and the accepted one.
    advance : In(1)
        The head descriptor completed: head and sequence number += 1.
    cmd_base, cpl_base : Out(64)
        Accepted ring bases.
    mask : Out(32)
        Ring size - 1.
    head : Out(32)
        Next descriptor to execute (= completions written).
    seq : Out(32)
        Descriptors completed since the ring was configured.
    pending : Out(1)
        A descriptor is waiting (head != tail).
    error : Out(error_event_layout)
        Combinational: a refused write or RECOVER this cycle.

    Raises
    ------
    KeyError
        If ``csr_addr`` lacks a register of ``RING_REGS`` or ``"control"``.
    """

    def __init__(self, cfg: DeviceConfig, csr_addr: dict):
        self._cfg, self._csr_addr = cfg, checked_csr_addr(csr_addr)
        members = {
            "ready": In(1), "executing": In(1), "persist_busy": In(1),
            "recover_req": In(1), "recover": Out(1), "advance": In(1),
            "cmd_base": Out(64), "cpl_base": Out(64), "mask": Out(32),
            "head": Out(32), "seq": Out(32), "pending": Out(1),
            "error": Out(error_event_layout),
        }
        for r in RING_REGS:
            members[r] = In(32)
            members[r + "_swmod"] = In(1)
            members[r + "_next"] = Out(32)
            members[r + "_we"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s_base = self._cfg.staging_base
        s_end = self._cfg.staging_base + self._cfg.staging_size
        cmd_base, cpl_base, head, seq = self.cmd_base, self.cpl_base, self.head, self.seq
        size = Signal(32)
        tail = Signal(32)
        mask = self.mask
        m.d.comb += [mask.eq(size - 1), self.pending.eq(head != tail)]
        ev = self.error
        busy_now = self.pending | self.executing

        # ---- configuration registers (sampled one cycle after the pulse) --------------------
        sw_d = {r: Signal(name=f"{r}_swmod_d") for r in RING_REGS}
        for r in RING_REGS:
            m.d.sync += sw_d[r].eq(getattr(self, r + "_swmod"))
        shadow = {"cmd_base_lo": cmd_base[:32], "cmd_base_hi": cmd_base[32:],
                  "cmd_size": size, "cpl_base_lo": cpl_base[:32], "cpl_base_hi": cpl_base[32:]}
        for r in RING_REGS:
            if r == "cmd_tail":
                continue
            with m.If(sw_d[r]):
                with m.If(busy_now):
                    m.d.comb += [ev.valid.eq(1), ev.code.eq(DeviceError.CSR_BUSY),
                                 ev.value.eq(self._csr_addr[r]),
                                 getattr(self, r + "_we").eq(1),
                                 getattr(self, r + "_next").eq(shadow[r])]
                with m.Else():
                    m.d.sync += [shadow[r].eq(getattr(self, r)), head.eq(0), tail.eq(0),
                                 seq.eq(0)]
                    m.d.comb += [self.cmd_tail_we.eq(1), self.cmd_tail_next.eq(0)]

        # ---- doorbell: ring configuration checks, then the new tail ------------------------
        size_ok = Signal()
        m.d.comb += size_ok.eq((size >= 2) & (size <= MAX_RING) & ((size & (size - 1)) == 0))
        ring_bytes = size * 64

        def ring_ok(base):
            return ((base[:6] == 0) & (base >= s_base) & (base + ring_bytes <= s_end))
        v = self.cmd_tail
        n_new = Signal(32)
        free = Signal(32)
        m.d.comb += [n_new.eq((v - tail) & mask), free.eq(size - 1 - ((tail - head) & mask))]
        with m.If(sw_d["cmd_tail"]):
            bad = Signal()
            m.d.comb += bad.eq(1)
            with m.If(~self.ready):
                m.d.comb += [ev.code.eq(DeviceError.NOT_READY), ev.value.eq(v)]
            with m.Elif(~size_ok):
                m.d.comb += [ev.code.eq(DeviceError.RING_CONFIG), ev.value.eq(size)]
            with m.Elif(~ring_ok(cmd_base)):
                m.d.comb += [ev.code.eq(DeviceError.RING_CONFIG), ev.value.eq(cmd_base)]
            with m.Elif(~ring_ok(cpl_base)):
                m.d.comb += [ev.code.eq(DeviceError.RING_CONFIG), ev.value.eq(cpl_base)]
            with m.Elif(v >= size):
                m.d.comb += [ev.code.eq(DeviceError.DOORBELL_RANGE), ev.value.eq(v)]
            with m.Elif(n_new > free):
                m.d.comb += [ev.code.eq(DeviceError.RING_OVERFLOW), ev.value.eq(v)]
            with m.Else():
                m.d.comb += bad.eq(0)
                m.d.sync += tail.eq(v)
            with m.If(bad):
                m.d.comb += [ev.valid.eq(1), self.cmd_tail_we.eq(1),
                             self.cmd_tail_next.eq(tail)]

        # ---- RECOVER: only while nothing executes or is pending -----------------------------
        with m.If(self.recover_req):
            with m.If(busy_now | self.persist_busy):
                m.d.comb += [ev.valid.eq(1), ev.code.eq(DeviceError.CSR_BUSY),
                             ev.value.eq(self._csr_addr["control"])]
            with m.Else():
                m.d.comb += self.recover.eq(1)

        with m.If(self.advance):
            m.d.sync += [head.eq((head + 1) & mask), seq.eq(seq + 1)]
        return m
