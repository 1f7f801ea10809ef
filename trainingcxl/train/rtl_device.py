"""The RTL as a trainer-facing embedding device, with power failures and a golden-model twin.

:class:`RtlDevice` is :class:`sw_model.embedding_device.FixedPointEmbeddings` (the same staging
layout and descriptor bytes as the golden-model device) whose five I/O primitives run on the
device top under cocotb:

* ``write_staging``: CXL.mem writes by the host model (``MemWr``, ``MemWrPtl`` for the bytes of
  a partly covered line), all issued, then every ``Cmp`` awaited;
* ``read_mem``: ``MemRd`` SnpCur of every line (LOOKUP outputs, MLP slot after recovery);
* ``submit``: descriptors through the host into the command ring, doorbell CSR, completion
  records read through the host (``cosim.device_driver.DeviceDriver.submit``);
* ``restart_device``: reset with the crash image as PMEM contents, ``CONTROL.RECOVER``, table
  directory, rings and ``MLP_LAG`` programmed again, ``MLP_SLOT``/``MLP_EPOCH`` read;
* ``read_tables_q``: the table region read backdoor from the PMEM model (reporting only).

The trainer (:func:`sw_model.dlrm.train`) is blocking code: it runs in a thread started with
``cocotb.task.bridge`` and every primitive enters the simulator through
``cocotb.task.resume``.

**Power failures** (:meth:`RtlDevice.plan_crashes`): a crash point is ``(batch, fraction)``;
when the LOOKUP of that batch starts, a timer is armed ``fraction`` x (cycles of the previous
batch) ahead. When it fires, :func:`cosim.powerfail.power_fail` takes the crash image (kept
writes, torn in-flight words, staging garbage), the running primitive is cancelled and raises
:class:`PowerFailure`; so do later ones until ``restart``. A crash may land in any phase:
LOOKUP, the host's MLP time, UPDATE, SNAPSHOT, COMMIT.

**Golden-model twin** (``twin``, a :mod:`trainingcxl.train.twin` checker over a
:class:`sw_model.embedding_device.ModelDevice` started from
the same tables): every primitive is applied to it too and must agree: every completion record
(all fields but ``cycles``), every byte the host reads. After a power failure the twin gets a
copy of the RTL's crash image and recovers it itself; the committed batch, MLP slot and epoch,
and the whole memory outside staging must equal the RTL's recovery. That shows the RTL's
recovery consistent with the model's on the same image, but nothing about the image: so first
the RTL's recovery is judged from the host's own run
(:func:`trainingcxl.train.twin.recovery_problems`): COMMITTED is
the twin's last committed batch, or the next one if the power failed during its COMMIT; the
tables equal the twin's own tables at that batch (kept at every COMMIT, never taken from the
image); the MLP slot holds a payload the host snapshotted at that epoch, with ``C - k <= epoch
<= C``. :meth:`final_check` compares the whole memory outside staging at the end. Any
difference raises :class:`trainingcxl.train.twin.TwinMismatch` (the run fails; it is a bug on one
side). With the twin in its own process (the default) a difference is raised by a later call
than the one that found it, at the latest by the next recovery or memory comparison.

Cycle accounting: ``phase_cycles[batch][phase]`` for phases lookup, mlp (the host's MLP time,
``mlp_cycles`` of waiting before each UPDATE), update, snapshot, commit, recover; and
``snap_background[epoch]`` = cycles from the SNAPSHOT's completion to ``STATUS.SNAP_BUSY``
clearing (the copy running behind later descriptors).
"""
from __future__ import annotations

import random
from asyncio import CancelledError

import cocotb
from cocotb.task import resume
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, Timer

from cosim.powerfail import power_fail
from sw_model.embedding_device import FixedPointEmbeddings, PowerFailure
from sw_model.memory import LineSnapshot
from sw_model.training import read_snap_slot
from trainingcxl.train.twin import TwinMismatch

__all__ = ["RtlDevice"]

LINE = 64
STATUS_SNAP_BUSY = 1 << 4
ALL_BE = (1 << LINE) - 1


def _lines_of(chunks):
    """``{line address: (64 bytes, byte-enable mask)}`` covering ``[(addr, bytes)]``."""
    out = {}
    for addr, data in chunks:
        data = bytes(data)
        o = 0
        while o < len(data):
            a = addr + o
            la, off = a - a % LINE, a % LINE
            k = min(LINE - off, len(data) - o)
            if k == LINE:                          # a whole line replaces what was there
                out[la] = (data[o:o + LINE], ALL_BE)
                o += LINE
                continue
            got = out.get(la)
            buf, be = (bytearray(got[0]), got[1]) if got else (bytearray(LINE), 0)
            buf[off:off + k] = data[o:o + k]
            be |= ((1 << k) - 1) << off
            out[la] = (buf, be)
            o += k
    return out


class RtlDevice(FixedPointEmbeddings):
    """See the module docstring. ``drv``: a :class:`cosim.device_driver.DeviceDriver` whose PMEM
    model already holds the initial tables; call :meth:`power_on` (async) before training."""

    def __init__(self, layout, *, drv, twin=None, mlp_lag=None, mlp_cycles: int = 0,
                 seed: int = 0, log=None):
        super().__init__(layout, mlp_lag=mlp_lag)
        self.drv, self.pmem, self.dut = drv, drv.pmem, drv.dut
        self.twin = twin
        self.mlp_cycles = int(mlp_cycles)
        self.seed = seed
        self.log = log or (lambda msg: None)
        self.dead = False
        self._op = None                # the primitive running in the simulator (_guarded)
        self.crash_image = None
        self.crashes = []              # dicts: cycle, batch, phase, image stats, recovery
        self._plan = []                # [(batch, fraction)] not fired yet
        self._armed = None
        self.phase = "idle"
        self.batch = 0
        self.phase_cycles: dict[int, dict[str, int]] = {}
        self.batch_start: dict[int, int] = {}
        self.snap_background: dict[int, int] = {}
        self._snap_task = None
        self.link: dict[str, int] = {}   # phase -> CXL.mem data bytes (64 per line moved)
        cfg = layout.cfg
        self.staging = (cfg.staging_base, cfg.staging_size)
        self._commit_in_flight = False
        self._blobs: dict[int, list] = {}

    # ------------------------------------------------------------------ bridging
    def _call(self, coro_fn, *args):
        """Run ``coro_fn(*args)`` in the simulator (from the trainer thread), racing it with a
        power failure; the phase's cycles are accounted."""
        return resume(self._guarded)(coro_fn, *args)

    async def _guarded(self, coro_fn, *args):
        if self.dead:
            raise PowerFailure("device is powered off (restart() first)")
        t0 = self.pmem.cycle
        task = self._op = cocotb.start_soon(coro_fn(*args))
        try:
            return await task
        except CancelledError:
            if not self.dead:
                raise
            raise PowerFailure(f"power failure at cycle {self.crash_image.cycle} during "
                               f"{self.phase} of batch {self.batch}") from None
        finally:
            self._op = None
            self._account(self.pmem.cycle - t0)

    def _link(self, lines: int):
        self.link[self.phase] = self.link.get(self.phase, 0) + LINE * lines

    def _account(self, cycles: int):
        d = self.phase_cycles.setdefault(self.batch, {})
        d[self.phase] = d.get(self.phase, 0) + cycles

    # ------------------------------------------------------------------ power
    def plan_crashes(self, points):
        """``[(batch, fraction)]``: crash points, see the module docstring."""
        self._plan = sorted((int(b), float(f)) for b, f in points)

    async def _arm(self, delay: int):
        period = self.pmem.period
        if delay > 1:
            await Timer((delay - 1) * period, "step")
        await RisingEdge(self.drv.clock)
        await self.pmem.settle()          # every handshake of this edge taken, none of the next
        if self.dead:
            return
        cycle = self.pmem.cycle
        pseed = random.Random(f"demo-crash-{self.seed}-{cycle}").getrandbits(63)
        self.crash_image = power_fail(self.pmem, random.Random(pseed), staging=self.staging,
                                      cycle=cycle)
        self.dead = True
        if self.phase == "commit":          # kept through failures of the recovery itself
            self._commit_in_flight = True
        rec = {k: v for k, v in self.crash_image.stats().items() if k != "seed"}
        rec.update(cycle=cycle, batch=self.batch, phase=self.phase, point_seed=pseed)
        self.crashes.append(rec)
        self.log(f"power failure at cycle {cycle}: batch {self.batch}, {self.phase}")
        if self._snap_task is not None and not self._snap_task.done():
            self._snap_task.cancel()
        if self._op is not None and not self._op.done():
            self._op.cancel()               # its _guarded raises PowerFailure

    def _maybe_arm(self, batch: int):
        while self._plan and self._plan[0][0] < batch:
            self._plan.pop(0)              # a batch skipped (never reached again)
        if self._plan and self._plan[0][0] == batch and self._armed is None:
            _, frac = self._plan.pop(0)
            prev = self.phase_cycles.get(batch - 1, {})
            est = sum(v for k, v in prev.items() if k != "recover") or 4000
            delay = max(1, int(frac * est))
            self._armed = batch
            resume(self._start_arm)(delay)

    async def _start_arm(self, delay):
        self._arm_task = cocotb.start_soon(self._arm(delay))

    async def power_on(self, init_image):
        """First power-on: reset with ``init_image`` (tables) in PMEM, recover (formats the
        superblock), program directory, rings and MLP_LAG."""
        await self._a_boot(lambda: self.drv.load_image(init_image))

    async def _a_boot(self, in_reset):
        drv, L = self.drv, self.layout
        await drv.power_cycle(in_reset=in_reset)
        c = await drv.recover()
        await drv.configure(L.directory(), 0, L.cmd_ring, L.ring_size, L.cpl_ring)
        if self.mlp_lag is not None:
            await drv.write("MLP_LAG", self.mlp_lag)
        return c

    # ------------------------------------------------------------------ primitives
    def write_staging(self, chunks):
        if self.twin is not None and not self.dead:
            self.twin.write_staging(chunks)
        self._call(self._a_write, chunks)

    async def _a_write(self, chunks):
        lines = _lines_of(chunks)
        await self.drv.write_lines([(la, bytes(buf), be)
                                    for la, (buf, be) in sorted(lines.items())])
        self._link(len(lines))

    def read_mem(self, addr, n):
        got = self._call(self._a_read, addr, n)
        if self.twin is not None:
            self.twin.check_read(addr, n, got, f"batch {self.batch}, {self.phase}")
        return got

    async def _a_read(self, addr, n):
        first, last = addr - addr % LINE, addr + n
        lines = list(range(first, last, LINE))
        data = b"".join(await self.drv.read_lines(lines))
        self._link(len(lines))
        return data[addr - first:addr - first + n]

    def submit(self, descs):
        got = self._call(self._a_submit, descs)
        if self.twin is not None:
            self.twin.check_submit(descs, got, f"batch {self.batch} {self.phase}")
        return got

    async def _a_submit(self, descs):
        cpls = await self.drv.submit(descs)
        self._link(2 * len(descs))             # descriptor lines written, records read
        return cpls

    def set_mlp_lag_csr(self, k):
        if self.twin is not None:
            self.twin.set_mlp_lag_csr(k)
        self._call(self.drv.write, "MLP_LAG", k)

    def read_tables_q(self):
        L, mem = self.layout, self.pmem.mem
        return [np.frombuffer(mem.read(L.table_base[t], r * d * 4), dtype="<i4")
                .astype(np.int32).reshape(r, d)
                for t, (r, d) in enumerate(zip(L.table_rows, L.table_dims))]

    def restart_device(self):
        if not self.dead:
            raise RuntimeError("restart without a power failure")
        self.phase = "recover"
        t0 = self.pmem.cycle
        c, slot, epoch, n_rec = resume(self._a_restart)()
        self._account(self.pmem.cycle - t0)
        rec = self.crashes[-1]
        rec.update(committed=c, mlp_slot=slot, mlp_epoch=epoch, records_rolled_back=n_rec,
                   recover_cycles=self.pmem.cycle - t0)
        if self.twin is not None:
            self._twin_restart(c, slot, epoch)
        self.log(f"recovered: committed batch {c}, MLP slot {slot} epoch {epoch}, "
                 f"{n_rec} undo records applied")
        return c, slot, epoch

    async def _a_restart(self):
        img = self.crash_image
        self.dead = False
        self._armed = None
        c = await self._a_boot(lambda: self.drv.load_image(img))
        slot = await self.drv.read("MLP_SLOT")
        epoch = await self.drv.read64("MLP_EPOCH")
        n_rec = await self.drv.read("RECOVERED_RECORDS")
        return c, slot, epoch, n_rec

    def _twin_restart(self, c, slot, epoch):
        payload = None
        if slot in (1, 2):
            _h, payload = read_snap_slot(self.layout.cfg, self.pmem.mem, slot - 1)
        self.twin.check_recovery(
            c=c, slot=slot, epoch=epoch, tables=self.read_tables_q(), slot_payload=payload,
            commit_in_flight=self._commit_in_flight, blobs=self._blobs, lag=self.mlp_lag,
            crash_image=LineSnapshot.of(self.crash_image.mem))
        self._commit_in_flight = False
        self.compare_memory("after recovery")

    def compare_memory(self, what: str):
        """The memory outside staging equal on both sides (RTL PMEM image, twin's memory)."""
        if self.twin is not None:
            self.twin.compare_memory(what, LineSnapshot.of(self.pmem.mem))

    # ------------------------------------------------------------------ phases
    def lookup_q(self, batch, bags, *, log=True):
        self.batch, self.phase = batch, "lookup"
        self.batch_start.setdefault(batch, self.pmem.cycle)
        self._maybe_arm(batch)
        return super().lookup_q(batch, bags, log=log)

    def update_q(self, batch, bags, grads_q, lr_q):
        self.batch = batch
        if self.twin is not None:
            self.twin.note_update([x for _, x in bags])
        if self.mlp_cycles:
            self.phase = "mlp"
            self._call(self._a_wait, self.mlp_cycles)
        self.phase = "update"
        return super().update_q(batch, bags, grads_q, lr_q)

    async def _a_wait(self, cycles):
        await self.drv.idle(cycles)

    def snapshot_q(self, epoch, blob):
        self.phase = "snapshot"
        self._blobs.setdefault(epoch, []).append(bytes(blob))
        super().snapshot_q(epoch, blob)
        resume(self._start_snap_watch)(epoch)

    async def _start_snap_watch(self, epoch):
        self._snap_task = cocotb.start_soon(self._snap_watch(epoch, self.pmem.cycle))

    async def _snap_watch(self, epoch, t0):
        while await self.drv.read("STATUS") & STATUS_SNAP_BUSY:
            await Timer(32 * self.pmem.period, "step")     # one wake, not one per clock edge
        self.snap_background[epoch] = self.pmem.cycle - t0

    def commit_q(self, batch):
        self.phase = "commit"
        super().commit_q(batch)
        if self.twin is not None:
            self.twin.note_commit()
        self.phase = "idle"

    def final_check(self):
        """At the end: the whole memory outside staging equals the twin's."""
        resume(self._a_quiesce)()
        self.compare_memory("end of training")
        if self.twin is not None:
            self.twin.close()

    async def _a_quiesce(self):
        task = getattr(self, "_arm_task", None)
        if task is not None and not task.done():
            task.cancel()                  # a crash point armed but not reached: dropped
        for _ in range(100_000):
            if not await self.drv.read("STATUS") & STATUS_SNAP_BUSY:
                break
            await Timer(64 * self.pmem.period, "step")
        else:
            raise TwinMismatch("STATUS.SNAP_BUSY still set 6.4 M cycles after the last batch")
        await ClockCycles(self.drv.clock, 8)
