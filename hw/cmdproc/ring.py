"""RingRegisters: the command/completion ring configuration, indices and doorbell checks."""
from amaranth.hdl import Cat, Module, Mux, Signal
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
      RING_OVERFLOW); a refused value is written back. The configuration checks and the mask
      come registered from :class:`RingConfigChecks`, which computes them from the
      configuration registers as written (held while a write is refused), and the free-entry
      count is a register: the doorbell's own path compares only the new tail.

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
        sw_d = {r: Signal(name=f"{r}_swmod_d") for r in RING_REGS}
        for r in RING_REGS:
            m.d.sync += sw_d[r].eq(getattr(self, r + "_swmod"))
        shadow = {"cmd_base_lo": cmd_base[:32], "cmd_base_hi": cmd_base[32:],
                  "cmd_size": size, "cpl_base_lo": cpl_base[:32], "cpl_base_hi": cpl_base[32:]}
        for r in shadow:
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
        # the checks see each register as written if it is accepted (a written value where a
        # write is pending, and hold while one is refused)
        cand = {r: Signal(32, name=f"{r}_cand") for r in shadow}
        m.d.comb += [cand[r].eq(Mux(sw_d[r], getattr(self, r), shadow[r])) for r in shadow]
        cfg_wr = Signal()           # a configuration register was written (accepted or not)
        m.d.comb += cfg_wr.eq(Cat(sw_d[r] for r in shadow).any())
        m.submodules.checks = checks = RingConfigChecks(self._cfg)
        m.d.comb += [checks.size.eq(cand["cmd_size"]),
                     checks.cmd_base.eq(Cat(cand["cmd_base_lo"], cand["cmd_base_hi"])),
                     checks.cpl_base.eq(Cat(cand["cpl_base_lo"], cand["cpl_base_hi"])),
                     checks.load.eq(~(cfg_wr & busy_now))]
        mask = self.mask
        m.d.comb += mask.eq(checks.mask)

        # ---- doorbell: ring configuration checks, then the new tail ------------------------
        v = self.cmd_tail
        n_new = Signal(32)
        m.d.comb += n_new.eq((v - tail) & mask)
        # free entries, mask - ((tail - head) & mask), kept in a register: less the accepted
        # doorbell's new descriptors, plus one per completed descriptor, the new mask after a
        # configuration write (head = tail = 0)
        free = Signal(32, init=0xFFFFFFFF)
        added = Signal(32)
        m.d.sync += free.eq(free - added + self.advance)
        with m.If(cfg_wr & ~busy_now):
            m.d.sync += free.eq(cand["cmd_size"] - 1)
        with m.If(sw_d["cmd_tail"]):
            bad = Signal()
            m.d.comb += bad.eq(1)
            with m.If(~self.ready):
                m.d.comb += [ev.code.eq(DeviceError.NOT_READY), ev.value.eq(v)]
            with m.Elif(checks.error.valid):
                m.d.comb += [ev.code.eq(checks.error.code), ev.value.eq(checks.error.value)]
            with m.Elif(v >= size):
                m.d.comb += [ev.code.eq(DeviceError.DOORBELL_RANGE), ev.value.eq(v)]
            with m.Elif(n_new > free):
                m.d.comb += [ev.code.eq(DeviceError.RING_OVERFLOW), ev.value.eq(v)]
            with m.Else():
                m.d.comb += [bad.eq(0), added.eq(n_new)]
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
