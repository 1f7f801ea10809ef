"""Host driver for the TrainingCXL device top under cocotb (the trainer uses it too).

What goes where:

* **CSRs** (control, status, ring registers, table directory, LR): AXI4-Lite through
  ``cosim.csr.CsrMaster`` on the ``s_axil`` port, registers by name (hw/csr/regmap.json).
* **Descriptors** are written into the command ring and **completion records** are read from
  the completion ring through the DCOH, by the CXL.mem host model (``cosim.cxl_host``): one
  uncached full-line ``MemWr`` per descriptor (all issued together, the doorbell is rung only
  after every ``Cmp``), one ``MemRd`` with ``SnpCur`` per completion record. The host never
  caches a ring line, so the device's own RdCur/writes of those lines need no snoop answers
  beyond the DCOH's bookkeeping. ``via_host=False`` writes and reads them backdoor instead.
* **Bulk staging data** (offsets, indices, gradients) is written backdoor into the PMEM model's
  memory (:meth:`write_staging`), and LOOKUP outputs are read backdoor; the host never holds
  those lines, so the backdoor is coherent. Table contents are checked backdoor too.

A host (HostCore + its channel coroutine) lives for one power-on: after a crash or reset call
:meth:`new_host` (the old host's outstanding transactions died with the device).

The host's channel coroutine wakes Python on every clock edge. While the device works alone
(descriptors executing, the host's MLP time, a recovery) the host has nothing to do and holds
no line, so :meth:`detach_host` stops it and holds the device-to-host channels not ready (a
message the device sent meanwhile waits there, and :meth:`attach_host` refuses it), and
:meth:`attach_host` starts a fresh host. ``detach_while_waiting`` does this around every wait
for completions (:meth:`submit`) and every :meth:`idle`.

Timeouts raise :class:`DriverError` naming the register state, never hang.
"""
from __future__ import annotations

import logging
import random

from cocotb.triggers import ClockCycles, First, RisingEdge, Timer

from cosim import fcov
from hw.encodings import CPL_BYTES, CPL_FIELDS, DESC_BYTES, DeviceError, unpack_fields

__all__ = ["DeviceDriver", "DriverError"]

LINE = 64


class DriverError(AssertionError):
    """The device did not do what the driver waited for (timeout, error status)."""


def _make_csr(dut, clock, reset):
    from cosim.csr import CsrMaster
    return CsrMaster(dut, prefix="s_axil", clock=clock, reset=reset)


def line_writes(chunks) -> list:
    """``[(addr, bytes)]`` as whole-line writes ``[(line address, 64 bytes, byte enables)]``
    in address order, chunks sharing a line merged (a later chunk's bytes win)."""
    lines: dict[int, tuple[bytearray, int]] = {}
    for addr, data in chunks:
        for k, byte in enumerate(data):
            a = addr + k
            buf, be = lines.setdefault(a - a % LINE, (bytearray(LINE), 0))
            buf[a % LINE] = byte
            lines[a - a % LINE] = (buf, be | 1 << (a % LINE))
    return [(a, bytes(buf), be) for a, (buf, be) in sorted(lines.items())]


class DeviceDriver:
    """Driver of one device top (``dut``) whose media is the PMEM model ``pmem``.

    ``poll``: cycles between CSR polls while waiting. ``via_host``: descriptors/completions
    through the CXL.mem host (default) or backdoor. ``host_seed``: seed of the host model.
    ``quiet``: the AXI4-Lite master logs warnings only (not one line per access).
    ``use_irq``: wait for completions on the ``irq`` port (IRQ_ENABLE.CPL is set by
    :meth:`configure`) instead of polling CPL_HEAD. ``detach_while_waiting``: no host while
    the device executes a doorbell's descriptors or during :meth:`idle` (module docstring).
    ``host``: the CXL.mem host model, ``"python"`` (``cosim.cxl_host``, the default) or
    ``"cpp"`` (``cosim.host_cpp``: the same requests and checks, compiled into the simulator;
    on a ``cosim.build.device_build`` top, without the host action log).
    ``csr_model``: the CSR master when ``csr`` is None, ``"python"`` (cocotbext-axi, the
    default) or ``"cpp"`` (``cosim.csr_cpp``: compiled into a ``cosim.build.device_build``
    top; :meth:`wait_head` is then one job of the compiled master).
    """

    M2S_CHANNELS = ("m2s_req", "m2s_rwd", "m2s_birsp")
    S2M_CHANNELS = ("s2m_ndr", "s2m_drs", "s2m_bisnp")

    STATUS_BUSY, STATUS_ERROR, STATUS_READY, STATUS_RECOVERING = 1, 2, 4, 8
    STATUS_SNAP_BUSY = 16
    IRQ_CPL, IRQ_ERR, IRQ_RECOVERED = 1, 2, 4

    def __init__(self, dut, pmem, cfg, *, clock=None, reset=None, csr=None, poll=16,
                 via_host=True, host_seed=0, log=None, quiet=True, use_irq=True,
                 detach_while_waiting=False, host="python", csr_model="python"):
        from cosim.csr_cpp import CSR_MODELS
        self.dut = dut
        self.pmem = pmem
        self.cfg = cfg
        self.clock = clock if clock is not None else dut.clk
        self.reset_sig = reset if reset is not None else dut.rst
        if csr_model not in CSR_MODELS:
            raise ValueError(f"csr_model must be one of {CSR_MODELS}, got {csr_model!r}")
        if csr is None and csr_model == "cpp":
            from cosim.csr_cpp import CppCsrMaster
            csr = CppCsrMaster(dut)
        self.csr = csr if csr is not None else _make_csr(dut, self.clock, self.reset_sig)
        axil = getattr(self.csr, "axil", None)
        if axil is not None and quiet:              # one INFO line per access otherwise
            for part in (axil, getattr(axil, "write_if", None), getattr(axil, "read_if", None)):
                if getattr(part, "log", None) is not None:
                    part.log.setLevel(logging.WARNING)
        self.poll = poll
        self.use_irq = use_irq
        self.detach_while_waiting = detach_while_waiting
        self.via_host = via_host
        from cosim.host_cpp import HOST_MODELS, prepare
        if host not in HOST_MODELS:
            raise ValueError(f"host must be one of {HOST_MODELS}, got {host!r}")
        if host == "cpp":
            prepare()
        self.host_model = host
        self.host_seed = host_seed
        self.log = log
        self.host = None
        self._channels = None
        self.ring_base = self.cpl_base = None
        self.ring_size = 0
        self.tail = 0
        self.head = 0            # CPL_HEAD as last read (0 after a reset or ring configuration)
        self.cycles_waited = 0
        # cycles from each RECOVER write to the end of its wait (failed ones included), summed
        # since the last power cycle: an upper bound of the device's PERF_CYC_RECOVER
        self.recover_cycles = 0
        self.actions = None      # cosim.trace.action_log.ActionLog while a trace is recorded
        # cycles spent per phase (PMEM model's clock count): write_descs, execute, read_cpls,
        # recover, configure
        self.phase_cycles: dict[str, int] = {}
        # PMEM cycle at which each doorbell write started (a bench clears it when it wants to)
        self.doorbell_cycles: list[int] = []

    def _phase(self, name: str, t0: int):
        self.phase_cycles[name] = self.phase_cycles.get(name, 0) + self.pmem.cycle - t0

    # ------------------------------------------------------------------ CSRs
    async def read(self, name: str) -> int:
        return int(await self.csr.read(name))

    async def write(self, name: str, value: int):
        await self.csr.write(name, int(value))

    async def read64(self, name: str) -> int:
        lo = await self.read(name + "_LO")
        hi = await self.read(name + "_HI")
        return hi << 32 | lo

    async def write64(self, name: str, value: int):
        await self.write(name + "_LO", value & 0xFFFFFFFF)
        await self.write(name + "_HI", value >> 32)

    async def error_state(self) -> dict:
        """STATUS and the last error (for messages)."""
        st = await self.read("STATUS")
        code = await self.read("ERR_CODE")
        try:
            code = DeviceError(code).name
        except ValueError:
            pass
        return {"status": st, "err_code": code, "err_value": await self.read64("ERR_VALUE"),
                "err_count": await self.read("ERR_COUNT")}

    # ------------------------------------------------------------------ power and host
    def _host_sig(self, name: str):
        """The handle the Python host writes for the host channel signal ``name``."""
        from cosim.host_cpp.wrapper import host_input
        return host_input(self.dut, getattr(self.dut, name))

    def drive_idle(self):
        """Host channels idle (driven, no X) and ready, before a host model exists."""
        for ch in ("m2s_req", "m2s_rwd", "m2s_birsp"):
            self._host_sig(f"{ch}__valid").value = 0
            self._host_sig(f"{ch}__payload").value = 0
        for ch in ("s2m_ndr", "s2m_drs", "s2m_bisnp"):
            self._host_sig(f"{ch}__ready").value = 1

    async def power_cycle(self, *, in_reset=None, cycles: int = 4):
        """Assert reset for ``cycles``, run ``in_reset()`` (e.g. load a memory image) while it is
        asserted, release it, wait for the DCOH's init sweep (``ready`` port) and start a fresh
        host. The ring state the driver kept is forgotten."""
        if self.actions is not None and self.host is not None:
            self.actions.cut(self.host.core)
        self.stop_host()
        self.drive_idle()
        self.reset_sig.value = 1
        if self.actions is not None:
            self.actions.reset()
        await ClockCycles(self.clock, cycles)
        if in_reset is not None:
            in_reset()
        self.reset_sig.value = 0
        await ClockCycles(self.clock, 2)
        ready = getattr(self.dut, "ready", None)
        if ready is not None and not ready.value:
            # one wake at the edge `ready` rises (a registered output), not one per edge
            await First(RisingEdge(ready), Timer(100_000 * self.pmem.period, "step"))
            if not ready.value:
                raise DriverError("DCOH not ready 100000 cycles after reset")
        self.ring_base = self.cpl_base = None
        self.ring_size = self.tail = self.head = 0
        self.recover_cycles = 0
        if self.via_host:
            self.new_host()

    def new_host(self):
        """A fresh CXL.mem host (calm timing, strict checks against sw_model.coherence): the
        Python one (``cosim.cxl_host``) or, with ``host="cpp"``, the compiled one
        (``cosim.host_cpp``)."""
        from cosim.cxl_host import ChannelSet, CxlHost, HostCore, HostKnobs, Reference
        self.stop_host()
        self.host_seed = random.Random(self.host_seed).getrandbits(32)
        if self.host_model == "cpp":
            if self.actions is not None:
                raise DriverError("the host action log needs the Python host (host='python')")
            from cosim.host_cpp import CppHost
            self.host = CppHost(self.dut, self.cfg, seed=self.host_seed)
            return
        core = HostCore(self.cfg, seed=self.host_seed, knobs=HostKnobs.calm(),
                        reference=Reference(self.cfg), strict=True)
        self._channels = ChannelSet(self.dut, self.clock, self.reset_sig)
        self.host = CxlHost(self.dut, core, clock=self.clock, channels=self._channels)
        if self.actions is not None:
            self.actions.attach_host(core)
        self._channels.start()

    def stop_host(self):
        if self._channels is not None:
            self._channels.stop()
        if self.host is not None and self.host_model == "cpp":
            self.host.close()
        self._channels = None
        self.host = None

    def detach_host(self):
        """Stop the host and hold the device-to-host channels not ready until
        :meth:`attach_host`. The host must be idle: fails if it was still offering a message
        (descriptors are uncached writes and completions SnpCur reads, all awaited, so it
        holds no line and nothing outstanding)."""
        if self.host is not None:
            busy = [ch for ch in self.M2S_CHANNELS if getattr(self.dut, f"{ch}__valid").value]
            if busy:
                raise DriverError(f"host detached with a message offered on {busy}")
            if self.host_model == "cpp":
                self.host.detach()          # raises what the engine saw since its last job
        self.stop_host()
        for ch in self.S2M_CHANNELS:
            self._host_sig(f"{ch}__ready").value = 0

    def attach_host(self):
        """A fresh host (as :meth:`new_host`), unless one is attached or ``via_host`` is off;
        fails if the device offered a host message while none was attached."""
        if not self.via_host or self.host is not None:
            return
        sent = [ch for ch in self.S2M_CHANNELS if getattr(self.dut, f"{ch}__valid").value]
        if sent:
            raise DriverError(f"the device offered a message on {sent} while no host was "
                              "attached (descriptor execution and recovery must send none "
                              "to a host that holds no line)")
        self.new_host()

    async def idle(self, cycles: int):
        """Let ``cycles`` clock cycles pass (one Timer, no wake per edge), the host detached
        meanwhile when ``detach_while_waiting``."""
        detach = self.detach_while_waiting and self.via_host
        if detach:
            self.detach_host()
        await Timer(cycles * self.pmem.period, "step")
        if detach:
            self.attach_host()

    # ------------------------------------------------------------------ recovery, config
    async def start_recover(self, *, sleep_on_irq: bool = False):
        """CONTROL.RECOVER (recovery starts); with ``sleep_on_irq``, IRQ_ENABLE =
        RECOVERED|ERR first."""
        if sleep_on_irq:
            await self.write("IRQ_ENABLE", self.IRQ_RECOVERED | self.IRQ_ERR)
        await self.write("CONTROL", 1)

    async def recover(self, timeout: int = 200_000, *, sleep_on_irq: bool = False) -> int:
        """CONTROL.RECOVER, then poll STATUS until READY (and not RECOVERING). Returns the
        committed batch (COMMITTED_HI:LO). Raises :class:`DriverError` on timeout or when the
        recovery recorded an error (also when it stopped unready after a media error).

        ``sleep_on_irq``: IRQ_ENABLE = RECOVERED|ERR (left so) and sleep on the interrupt
        between STATUS reads instead of polling every ``poll`` cycles, which wakes Python on
        every edge (a long recovery costs thousands of wake-ups). A CSR master with ``poll``
        (the compiled one) reads STATUS every ``poll`` cycles in one job until RECOVERING is
        low, so the wait costs Python two wake-ups."""
        t0 = self.pmem.cycle
        try:
            return await self._recover(t0, timeout, sleep_on_irq)
        finally:
            self.recover_cycles += self.pmem.cycle - t0

    async def _recover(self, t0, timeout, sleep_on_irq):
        await self.start_recover(sleep_on_irq=sleep_on_irq)
        waited = 0
        compiled = hasattr(self.csr, "poll")
        while True:
            if compiled:
                # one job reads STATUS every `poll` cycles (or on irq) until RECOVERING is low
                _, st, _ = await self.csr.poll(
                    "STATUS", 0, mask=self.STATUS_RECOVERING,
                    wait=4096 if sleep_on_irq else self.poll,
                    timeout=max(timeout - (self.pmem.cycle - t0), 0))
            else:
                st = await self.read("STATUS")
            if st & self.STATUS_READY and not st & self.STATUS_RECOVERING:
                break
            if (st & self.STATUS_ERROR and
                    not st & (self.STATUS_READY | self.STATUS_RECOVERING)):
                # ended unready with an error (a media error stops recovery; a RECOVER
                # refused with CSR_BUSY): RECOVERING is already set when the first STATUS
                # read after the CONTROL write lands, so this is not a recovery yet to start
                raise DriverError(f"recovery stopped unready: {await self.error_state()}")
            if sleep_on_irq or compiled:
                waited = self.pmem.cycle - t0
            if waited >= timeout:
                raise DriverError(f"recovery not complete after {waited} cycles: "
                                  f"{await self.error_state()}")
            if compiled:            # neither READY nor RECOVERING: read again `poll` cycles on
                await Timer(self.poll * self.pmem.period, "step")
            elif sleep_on_irq:
                if not self.dut.irq.value:
                    # a Timer, not ClockCycles: ClockCycles wakes Python on every edge
                    await First(RisingEdge(self.dut.irq), Timer(4096 * self.pmem.period, "step"))
            else:
                await ClockCycles(self.clock, self.poll)
                waited += self.poll
        self.cycles_waited += waited
        self._phase("recover", t0)
        if st & self.STATUS_ERROR:
            raise DriverError(f"recovery ended with STATUS.ERROR: {await self.error_state()}")
        return await self.read64("COMMITTED")

    async def recovered_records(self) -> int:
        return await self.read("RECOVERED_RECORDS")

    async def configure(self, tables, lr: int, ring_base: int, ring_size: int, cpl_base: int):
        """Program the table directory (``tables``: objects with ``tid, base, rows, dim`` or
        tuples in that order), LR and the rings (head = tail = 0)."""
        t0 = self.pmem.cycle
        for t in tables:
            tid, base, rows, dim = ((t.tid, t.base, t.rows, t.dim) if hasattr(t, "tid")
                                    else tuple(t))
            await self.write64(f"TABLE{tid}_BASE", base)
            await self.write(f"TABLE{tid}_ROWS", rows)
            await self.write(f"TABLE{tid}_DIM", dim)
        await self.write("LR", lr)
        await self.write64("CMD_BASE", ring_base)
        await self.write("CMD_SIZE", ring_size)
        await self.write64("CPL_BASE", cpl_base)
        if self.use_irq and getattr(self.dut, "irq", None) is not None:
            await self.write("IRQ_ENABLE", self.IRQ_CPL)
        self.set_ring(ring_base, ring_size, cpl_base)
        self._phase("configure", t0)

    def set_ring(self, ring_base: int, ring_size: int, cpl_base: int):
        """The ring the device was just configured with (an idle ring's configuration resets
        its head and tail to 0), for a bench that wrote the ring CSRs itself."""
        self.ring_base, self.ring_size, self.cpl_base = ring_base, ring_size, cpl_base
        self.tail = self.head = 0

    # ------------------------------------------------------------------ data
    def write_staging(self, chunks):
        """Backdoor: ``[(addr, bytes)]`` into the PMEM model's memory (bulk data only)."""
        for a, d in chunks:
            self.pmem.mem.write(a, d)
            if self.actions is not None:
                self.actions.poke(a, d)

    async def write_data(self, chunks):
        """``[(addr, bytes)]`` through the host (:func:`line_writes`: MemWr per whole line,
        MemWrPtl with byte enables for a partial one), or backdoor with ``via_host=False``."""
        if self.via_host:
            await self.write_lines(line_writes(chunks))
        else:
            self.write_staging(chunks)

    def load_image(self, image):
        """Replace the PMEM model's media by ``image`` (a ``CrashImage`` or a memory), with
        its queues dropped (``cosim.powerfail.load_image``); call it while reset is asserted
        (``power_cycle(in_reset=lambda: drv.load_image(img))``). Reported to the action log,
        so the model's replay starts from the same media."""
        from cosim.powerfail import load_image
        load_image(self.pmem, image)
        if self.actions is not None:
            self.actions.load(self.pmem.mem)

    async def write_lines(self, items):
        """``[(addr, 64 bytes[, byte enables])]`` through the host (MemWr, MemWrPtl for partial
        enables, all issued, then all Cmps) or backdoor (``via_host=False``, whole lines)."""
        if not self.via_host:
            for it in items:
                if len(it) > 2 and it[2] != (1 << LINE) - 1:
                    raise ValueError("partial lines need the host (via_host=True)")
            self.write_staging([(a, d) for a, d, *_ in items])
            return
        if self.host_model == "cpp":
            await self.host.write_lines(items)
            return
        txns = [await self.host.write(a // LINE, bytes(d), *be, wait=False)
                for a, d, *be in items]
        for t in txns:
            await self.host.wait_txn(t)

    async def read_lines(self, addrs) -> list:
        """The 64-byte lines at ``addrs`` through the host (MemRd SnpCur, all issued, then
        all data) or backdoor (``via_host=False``)."""
        if not self.via_host:
            return [self.pmem.mem.read(a, LINE) for a in addrs]
        if self.host_model == "cpp":
            return await self.host.read_lines(addrs)
        txns = [await self.host.read(a // LINE, "cur", wait=False) for a in addrs]
        out = []
        for t in txns:
            await self.host.wait_txn(t)
            out.append(bytes(t.drs_data))
        return out

    # older names (benches written against the first version)
    _write_lines = write_lines
    _read_lines = read_lines

    # ------------------------------------------------------------------ submission
    async def submit(self, descs, timeout: int = 500_000, *, written: int = 0,
                     ahead=(), ahead_data=()) -> list:
        """Write ``descs`` (64-byte descriptors) into the ring after the current tail, ring the
        doorbell (CMD_TAIL), wait until CPL_HEAD reaches it, read and decode the completion
        records (``CPL_FIELDS`` dicts, ``status`` as int). At most ``ring_size - 1`` at once.

        A host that prepares its next doorbell while the device executes this one:
        ``ahead`` are the next call's descriptors, written into the ring slots after these
        once the doorbell is rung, before the wait (``descs`` and ``ahead`` together at most
        ``ring_size - 1``); the next call then passes ``written=len(ahead)``, the number of its
        first descriptors already in the ring. ``ahead_data`` (``[(addr, bytes)]``, e.g. the
        next batch's staging) is written through the host at the same time, before ``ahead``
        (MemWr, MemWrPtl for partial lines: :func:`line_writes`)."""
        n = len(descs)
        size = self.ring_size
        if self.ring_base is None:
            raise DriverError("submit before configure()")
        if not 0 <= written <= n:
            raise ValueError(f"written={written} of {n} descriptors")
        if n == 0:
            return []
        if n + len(ahead) > size - 1:
            raise ValueError(f"{n} descriptors" + (f" and {len(ahead)} ahead" if ahead else "")
                             + f" do not fit a ring of {size}")
        slots = [(self.tail + i) % size for i in range(n + len(ahead))]
        for d in (*descs, *ahead):
            if len(d) != DESC_BYTES:
                raise ValueError(f"descriptor of {len(d)} bytes")
        t0 = self.pmem.cycle
        await self.write_lines([(self.ring_base + DESC_BYTES * s, d)
                                for s, d in zip(slots[written:n], descs[written:])])
        self._phase("write_descs", t0)
        t0 = self.pmem.cycle
        new_tail = (self.tail + n) % size
        await self.doorbell(new_tail)
        if ahead_data:
            await self.write_data(ahead_data)
        if ahead:
            await self.write_lines([(self.ring_base + DESC_BYTES * s, d)
                                    for s, d in zip(slots[n:], ahead)])
        detach = self.detach_while_waiting and self.via_host
        if detach:
            self.detach_host()
        await self.wait_head(new_tail, timeout)
        if detach:
            self.attach_host()
        self._phase("execute", t0)
        t0 = self.pmem.cycle
        cpls = await self.completions(slots[:n])
        self._phase("read_cpls", t0)
        return cpls

    async def doorbell(self, new_tail: int, *, read_back: bool = True):
        """Write CMD_TAIL = ``new_tail`` (the descriptors are in the ring already). With
        ``read_back``, read CMD_TAIL back and raise :class:`DriverError` if the device refused
        it; without, the caller knows it is accepted (a bench that checks the CSRs later).
        Samples ``cmd.ring`` (cosim/fcov.py) when functional coverage is on: if descriptors
        may still be outstanding, that costs one CPL_HEAD read after the doorbell."""
        old_tail = self.tail
        self.doorbell_cycles.append(self.pmem.cycle)
        if not read_back:
            await self.write("CMD_TAIL", new_tail)
        else:
            if hasattr(self.csr, "write_read"):          # the compiled master: one job
                got = await self.csr.write_read("CMD_TAIL", new_tail)
            else:
                await self.write("CMD_TAIL", new_tail)
                got = await self.read("CMD_TAIL")
            if got != new_tail:
                raise DriverError(f"doorbell {new_tail} refused: {await self.error_state()}")
        self.tail = new_tail
        if fcov.enabled() and self.ring_size:
            size = self.ring_size
            if (old_tail - self.head) % size:
                self.head = await self.read("CPL_HEAD")
            fcov.sample_doorbell(size, old_tail, new_tail, (old_tail - self.head) % size)
            fcov.write()

    async def completions(self, slots) -> list:
        """Read and decode the completion records of ring ``slots`` (``CPL_FIELDS`` dicts,
        ``status`` as int); samples ``cmd.cpl`` when functional coverage is on."""
        recs = await self.read_lines([self.cpl_base + CPL_BYTES * s for s in slots])
        cpls = [unpack_fields(CPL_FIELDS, r) for r in recs]
        if fcov.enabled():
            for c in cpls:
                fcov.sample_cpl(int(c["kind"]), int(c["status"]))
            fcov.write()
        return cpls

    async def wait_head(self, target: int, timeout: int = 500_000):
        """Wait until CPL_HEAD == ``target``. With an ``irq`` port and ``use_irq``: sleep on the
        interrupt (IRQ_ENABLE.CPL, IRQ_STATUS.CPL cleared before each check, so no completion
        is missed), else poll every ``poll`` cycles. A CSR master with ``poll`` (the compiled
        one) runs the whole wait as one job."""
        irq = getattr(self.dut, "irq", None) if self.use_irq else None
        t0 = self.pmem.cycle
        if hasattr(self.csr, "poll"):
            clear = ("IRQ_STATUS", self.IRQ_CPL) if irq is not None else None
            matched, _, _ = await self.csr.poll("CPL_HEAD", target, clear=clear,
                                                wait=4096 if irq is not None else self.poll,
                                                timeout=timeout)
            if not matched:
                raise await self._head_timeout(target, self.pmem.cycle - t0)
            self.cycles_waited += self.pmem.cycle - t0
            self._head_reached(target)
            return
        while True:
            if irq is not None:
                await self.write("IRQ_STATUS", self.IRQ_CPL)      # write 1 to clear
            if await self.read("CPL_HEAD") == target:
                break
            waited = self.pmem.cycle - t0
            if waited >= timeout:
                raise await self._head_timeout(target, waited)
            if irq is not None:
                if not irq.value:
                    # a Timer, not ClockCycles: ClockCycles wakes Python on every edge
                    await First(RisingEdge(irq), Timer(4096 * self.pmem.period, "step"))
            else:
                await ClockCycles(self.clock, self.poll)
        self.cycles_waited += self.pmem.cycle - t0
        self._head_reached(target)

    def _head_reached(self, head: int):
        if fcov.enabled() and self.ring_size:
            fcov.sample_wait(self.ring_size, self.head, head, self.tail)
            fcov.write()
        self.head = head

    async def _head_timeout(self, target: int, waited: int) -> DriverError:
        return DriverError(f"CPL_HEAD did not reach {target} in {waited} cycles (CMD_HEAD "
                           f"{await self.read('CMD_HEAD')}): {await self.error_state()}")

    # ------------------------------------------------------------------ MLP snapshots
    @staticmethod
    def snapshot_desc(epoch: int, src_addr: int, length: int, tag: int = 0) -> bytes:
        """64-byte SNAPSHOT descriptor (docs/training.md section 9): ``batch`` = epoch,
        ``data_addr`` = source byte address, ``length`` = payload bytes."""
        from hw.encodings import DESC_FIELDS, DescKind, pack_fields
        return pack_fields(DESC_FIELDS, {"kind": DescKind.SNAPSHOT, "tag": tag, "batch": epoch,
                                         "data_addr": src_addr, "length": length}, DESC_BYTES)

    async def mlp_state(self) -> dict:
        """``epoch`` (MLP_EPOCH_HI:LO), ``slot`` (MLP_SLOT), ``lag`` (MLP_LAG), ``busy``
        (STATUS.SNAP_BUSY)."""
        return {"epoch": await self.read64("MLP_EPOCH"), "slot": await self.read("MLP_SLOT"),
                "lag": await self.read("MLP_LAG"),
                "busy": int(bool(await self.read("STATUS") & self.STATUS_SNAP_BUSY))}

    async def wait_snapshot_idle(self, timeout: int = 500_000) -> int:
        """Poll STATUS every ``poll`` cycles until SNAP_BUSY = 0 (the snapshot's slot, header and
        superblock flip are persistent, MLP_EPOCH/MLP_SLOT updated). Returns cycles waited."""
        t0 = self.pmem.cycle
        if hasattr(self.csr, "poll"):
            # the compiled master reads STATUS every `poll` cycles in one job: two wake-ups,
            # and the same cycles whoever clocks the top (cosim.model_top)
            idle, _, _ = await self.csr.poll("STATUS", 0, mask=self.STATUS_SNAP_BUSY,
                                             wait=self.poll, timeout=timeout)
            if not idle:
                raise DriverError(f"STATUS.SNAP_BUSY still set after {timeout} cycles: "
                                  f"{await self.error_state()}")
            return self.pmem.cycle - t0
        while await self.read("STATUS") & self.STATUS_SNAP_BUSY:
            if self.pmem.cycle - t0 >= timeout:
                raise DriverError(f"STATUS.SNAP_BUSY still set after {timeout} cycles: "
                                  f"{await self.error_state()}")
            await ClockCycles(self.clock, self.poll)
        return self.pmem.cycle - t0
