"""cocotb adapter of the CXL.mem host: :class:`CxlHost` puts a :class:`~.core.HostCore` on the
six CXL.mem channel ports of a DUT and offers awaitable directed operations and random
traffic."""
from __future__ import annotations

import random

from .channels import ChannelSet, bursty_pauses
from .core import HostCore
from .protocol import (
    ALL_BE, IN_CHANNELS, OUT_CHANNELS, Txn,
)

__all__ = ["CxlHost"]


class CxlHost:
    """cocotb adapter: :class:`HostCore` on the six CXL.mem channel ports of ``dut``.

    ``stall``: per-channel pause probability (valid gaps on m2s_*, ready gaps on s2m_*), one
    float for all or a dict by channel name; pauses are bursty (:func:`bursty_pauses`).
    Directed operations are coroutines returning the finished :class:`Txn` (its ``ndr``,
    ``drs``, ``drs_data``, ``grant`` and cycle stamps)::

        host = CxlHost(dut, core, clock=dut.clk, reset=dut.rst, stall=0.2, channels=chans)
        t = await host.read(line, "own")        # MemRd(A, SnpInv): t.grant == "E"
        await host.run_random(5000, hot_lines)
    """

    def __init__(self, dut, core: HostCore, *, clock, reset=None, stall=0.0, channels=None,
                 stall_mean=3.0):
        from hw.cxl.messages import message_layout
        self.dut = dut
        self.core = core
        self.clock = clock
        own = channels is None
        self.channels = channels if channels is not None else ChannelSet(dut, clock, reset)
        rng = random.Random(core.seed * 1_000_003 + 17)
        names = OUT_CHANNELS + IN_CHANNELS
        stalls = stall if isinstance(stall, dict) else {c: stall for c in names}

        def pauses(ch):
            p = stalls.get(ch, 0.0)
            return bursty_pauses(random.Random(rng.getrandbits(32)), p, stall_mean) if p else None

        for ch in OUT_CHANNELS:
            self.channels.add_out(ch, message_layout(ch), self._popper(ch), core.on_sent,
                                  pauses(ch))
        self.channels.add_in("s2m_ndr", message_layout("s2m_ndr"), core.on_ndr, pauses("s2m_ndr"))
        self.channels.add_in("s2m_drs", message_layout("s2m_drs"), core.on_drs, pauses("s2m_drs"))
        self.channels.add_in("s2m_bisnp", message_layout("s2m_bisnp"), core.on_bisnp,
                             pauses("s2m_bisnp"))
        self.channels.every_cycle.append(core.tick)
        if own:
            self.channels.start()

    def _popper(self, ch):
        pop_due = self.core.pop_due

        def pop(cycle):
            m = pop_due(ch, cycle)
            return None if m is None else (m.payload, m)
        return pop

    @property
    def cycle(self) -> int:
        return self.channels.cycle

    async def wait_cycles(self, n: int):
        from cocotb.triggers import ClockCycles
        await ClockCycles(self.clock, n)

    async def wait_txn(self, txn: Txn, timeout: int = 20000) -> Txn:
        from cocotb.triggers import ClockCycles, Event, First
        if txn.done:
            return txn
        ev = Event()
        txn.callbacks.append(lambda t: ev.set())
        res = await First(ev.wait(), ClockCycles(self.clock, timeout))
        if not txn.done:
            raise AssertionError(f"{txn.describe()} not complete after {timeout} cycles "
                                 f"(ndr={txn.ndr}, drs={txn.drs}, seed {self.core.seed})")
        del res
        return txn

    # ---- directed operations -----------------------------------------------------------
    async def request(self, kind: str, line: int, *, wait=True, **kw) -> Txn:
        txn = self.core.issue(kind, line, **kw)
        return await self.wait_txn(txn) if wait else txn

    async def read(self, line: int, kind: str = "shared", **kw) -> Txn:
        """``kind``: shared (MemRd S), own (MemRd A), data (MemRdData), cur (MemRd SnpCur)."""
        return await self.request("rd_" + kind, line, **kw)

    async def write(self, line: int, data: bytes, be: int = ALL_BE, *, meta="I", poison=0,
                    **kw) -> Txn:
        """Uncached write of new data from I: MemWr (MemWrPtl when ``be`` is partial)."""
        kind = {"I": "uc_write", "noop": "uc_write_noop"}[meta]
        if be != ALL_BE and kind == "uc_write":
            kind = "uc_write_ptl"
        return await self.request(kind, line, data=data, be=be, poison=poison, **kw)

    async def writeback(self, line: int, keep: str = "I", **kw) -> Txn:
        """Write back a dirty line: keep "I" (drop), "E", "S" or "noop" (No-Op meta, keep E)."""
        kind = {"I": "wb_drop", "E": "wb_keep_e", "S": "wb_keep_s", "noop": "wb_noop"}[keep]
        return await self.request(kind, line, **kw)

    async def evict(self, line: int, **kw):
        """Drop a line with notice: MemClnEvct when clean, MemWr(I) when dirty; None from I."""
        st = self.core.state(line)
        if st == "M":
            return await self.request("wb_drop", line, **kw)
        if st in "SE":
            return await self.request("cln_evct", line, **kw)
        return None

    async def invalidate(self, line: int, own=True, nt=False, **kw) -> Txn:
        kind = ("invnt_" if nt else "inv_") + ("own" if own else "flush")
        return await self.request(kind, line, **kw)

    async def raw(self, channel: str, wait=True, **kw):
        txn = self.core.raw(channel, **kw)
        if txn is None or not wait:
            return txn
        return await self.wait_txn(txn)

    def load(self, line: int) -> bytes:
        return self.core.load(line)

    def store(self, line: int, data: bytes, be: int = ALL_BE):
        self.core.store(line, data, be)

    async def drain(self, timeout: int = 200_000, poll: int = 8):
        """Wait until the host has nothing queued or outstanding (checked every ``poll``
        cycles)."""
        from cocotb.triggers import ClockCycles
        for _ in range(0, timeout, poll):
            if self.core.idle():
                return
            await ClockCycles(self.clock, poll)
        raise AssertionError(f"host not idle after {timeout} cycles: outstanding "
                             f"{[t.describe() for t in self.core.txns.values()][:8]}, busy lines "
                             f"{[hex(a) for a in self.core.busy_lines()][:8]} (seed "
                             f"{self.core.seed})")

    async def run_random(self, n_messages: int, hot_lines, mix=None, timeout: int | None = None):
        """Random legal traffic on ``hot_lines`` until ``n_messages`` host messages were queued,
        then drain. Returns the core's summary."""
        self.core.start_random(n_messages, hot_lines, mix)
        await self.drain(timeout or 2000 + 400 * n_messages)
        return self.core.summary()
