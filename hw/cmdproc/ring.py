"""RingRegisters: the command/completion ring configuration, indices and doorbell checks."""
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import DeviceError
from .errors import error_event_layout
from .ring_checks import MAX_RING, RingConfigChecks

__all__ = ["RingRegisters", "RING_REGS", "MAX_RING"]

# ring registers the processor owns (value in, restore out)
RING_REGS = ("cmd_base_lo", "cmd_base_hi", "cmd_size", "cpl_base_lo", "cpl_base_hi", "cmd_tail")


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
      RING_OVERFLOW); a refused value is written back. The configuration checks, the mask and
      the free-entry count come registered from :class:`RingConfigChecks`, which computes them
      from the registers' next values: the doorbell's own path compares only the new tail.

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
        cmd_base, cpl_base, head, seq = self.cmd_base, self.cpl_base, self.head, self.seq
        size = Signal(32)
        tail = Signal(32)
        m.d.comb += self.pending.eq(head != tail)
        ev = self.error
        busy_now = self.pending | self.executing

        # ---- configuration registers (sampled one cycle after the pulse) --------------------
        # Each register's next value (``<r>_nx``) is the written one when it is accepted, else
        # the current one; the configuration checks and ``mask`` are registered from the next
        # values, so they change at the same edge as the registers they check.
        sw_d = {r: Signal(name=f"{r}_swmod_d") for r in RING_REGS}
        for r in RING_REGS:
            m.d.sync += sw_d[r].eq(getattr(self, r + "_swmod"))
        shadow = {"cmd_base_lo": cmd_base[:32], "cmd_base_hi": cmd_base[32:],
                  "cmd_size": size, "cpl_base_lo": cpl_base[:32], "cpl_base_hi": cpl_base[32:]}
        nxt = {r: Signal(32, name=f"{r}_nx") for r in shadow}
        head_nx, tail_nx = Signal(32), Signal(32)
        m.d.comb += [nxt[r].eq(shadow[r]) for r in shadow]
        m.d.sync += [shadow[r].eq(nxt[r]) for r in shadow]
        m.d.comb += [head_nx.eq(head), tail_nx.eq(tail)]
        m.d.sync += [head.eq(head_nx), tail.eq(tail_nx)]
        for r in shadow:
            with m.If(sw_d[r]):
                with m.If(busy_now):
                    m.d.comb += [ev.valid.eq(1), ev.code.eq(DeviceError.CSR_BUSY),
                                 ev.value.eq(self._csr_addr[r]),
                                 getattr(self, r + "_we").eq(1),
                                 getattr(self, r + "_next").eq(shadow[r])]
                with m.Else():
                    m.d.comb += [nxt[r].eq(getattr(self, r)), head_nx.eq(0), tail_nx.eq(0)]
                    m.d.sync += seq.eq(0)
                    m.d.comb += [self.cmd_tail_we.eq(1), self.cmd_tail_next.eq(0)]
        checks = RingConfigChecks(self._cfg)
        m.submodules.checks = checks
        m.d.comb += [checks.size.eq(nxt["cmd_size"]),
                     checks.cmd_base.eq(Cat(nxt["cmd_base_lo"], nxt["cmd_base_hi"])),
                     checks.cpl_base.eq(Cat(nxt["cpl_base_lo"], nxt["cpl_base_hi"])),
                     checks.head.eq(head_nx), checks.tail.eq(tail_nx)]
        m.d.comb += self.mask.eq(checks.mask)

        # ---- doorbell: ring configuration checks, then the new tail ------------------------
        v = self.cmd_tail
        n_new = Signal(32)
        m.d.comb += n_new.eq((v - tail) & checks.mask)
        with m.If(sw_d["cmd_tail"]):
            bad = Signal()
            m.d.comb += bad.eq(1)
            with m.If(~self.ready):
                m.d.comb += [ev.code.eq(DeviceError.NOT_READY), ev.value.eq(v)]
            with m.Elif(checks.error.valid):
                m.d.comb += [ev.code.eq(checks.error.code), ev.value.eq(checks.error.value)]
            with m.Elif(v >= size):
                m.d.comb += [ev.code.eq(DeviceError.DOORBELL_RANGE), ev.value.eq(v)]
            with m.Elif(n_new > checks.free):
                m.d.comb += [ev.code.eq(DeviceError.RING_OVERFLOW), ev.value.eq(v)]
            with m.Else():
                m.d.comb += [bad.eq(0), tail_nx.eq(v)]
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
            m.d.comb += head_nx.eq((head + 1) & checks.mask)
            m.d.sync += seq.eq(seq + 1)
        return m
