"""cocotb side of the media-fault campaign (``trainingcxl faults``, docs/faults.md).

One simulator launch runs ``batches`` training batches on the full device, each LOOKUP+LOG and
UPDATE of two tables (table 1's UPDATE with bags of its own, so the undo logger's synchronous
path runs), COMMIT and a SNAPSHOT of a staged MLP image, one descriptor per doorbell. Before
each batch's first attempt the PMEM model (:class:`cosim.pmem.MediaFault`) gets seeded random
fault rules (SLVERR or DECERR), per burst with probability ``p_b`` (per batch, log-uniform
between ``p`` and ``p / 30``): reads and writes of the tables, writes of the
undo log, reads and writes of the batch's staging data (index lists, gradients, outputs, the
snapshot's source), writes of the MLP slots; ``min(0.25, 10 p_b)`` on superblock writes.

The oracle (never the RTL's own output):

* every descriptor during which a fault was injected completes with ``MEDIA``, none without
  one (a failed record write of a LOOKUP is reported by the batch's next UPDATE or COMMIT);
  a SNAPSHOT completes OK at once and its background copy reports ``MEDIA`` (ERR_CODE, epoch
  in ERR_VALUE) exactly when a fault hit the copy, leaving MLP_SLOT/MLP_EPOCH unchanged;
* undo records recovery would apply hold only the rows' true contents (their state before the
  batch, from the golden model);
* a batch with a ``MEDIA`` is aborted (reset + RECOVER). With probability ``p_recovery`` the
  recovery gets one single-shot fault (SLVERR or DECERR) at a random log read, rollback table
  write or superblock write: if it meets it, it must report ``MEDIA`` and stay unready, and
  is retried without faults; if not, it must complete.
  Afterwards every table equals the golden model's committed state;
* the batch then runs again without faults and every table equals the model's; COMMITTED is
  the batch; the SNAPSHOT's slot holds the staged image.

No wait is unbounded (the driver's timeouts). The first violated rule ends the run; the result
JSON (``out``) holds the counts (faults by descriptor kind and region, MEDIA completions,
aborted batches, recoveries that met a fault) and the failure with the seed.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from cosim import params
from cosim.pmem import AxiResp, MediaFault
from cosim.tb.config import BenchConfig
from cosim.tb.device import E, K
from hw.encodings import DESC_FIELDS, unpack_fields
from sw_model.training import snap_slot_addr
from trainingcxl.faults.bench import (LINE, check_log_trustworthy, check_reported, check_tables,
                                      fresh, model_run, model_tables, random_batch, restore_config,
                                      submit)

__all__ = ["FaultParams", "media_fault_campaign"]


@dataclass(frozen=True)
class FaultParams:
    """``batches``; ``p``: fault probability per burst in the batch's regions; ``p_recovery``:
    chance that an abort's recovery gets one single-shot fault (at a random log read, table
    write or superblock write; a rule that never fires leaves a clean recovery); ``seed``;
    ``out``: result JSON; ``bench``: ``BenchConfig``."""
    out: str
    batches: int = 20
    p: float = 0.02
    p_recovery: float = 0.75
    seed: int = 1
    bench: BenchConfig = field(default_factory=BenchConfig)
    # a test of the oracle itself: "corrupt" flips a byte of a table row in the RTL's memory
    # after the first abort's recovery (must be reported as a failure)
    sabotage: str = ""


def _count(counts: dict, key: str, n: int = 1):
    counts[key] = counts.get(key, 0) + n


@cocotb.test()
async def media_fault_campaign(dut):
    """The campaign of the module docstring (parameters: :class:`FaultParams`)."""
    from cosim.device_driver import DeviceDriver, DriverError
    p = params.load(FaultParams)
    t0 = time.monotonic()
    tb = await fresh(dut, "faults", [(0, 48, 32, 0.0), (1, 32, 16, 0.0)])
    cfg = tb.cfg
    dirs = dict(tb.tables)
    dut._log.info(f"media-fault campaign: seed={tb.seed} batches={p.batches} p={p.p} "
                  f"p_recovery={p.p_recovery}")
    c = {"faults": 0, "faults_by_phase": {}, "faults_by_region": {}, "media_completions": 0,
         "aborted_batches": 0, "recoveries": 0, "recoveries_failed": 0,
         "snapshot_failures": 0, "batches_committed": 0, "descriptors": 0}
    failure = None
    tag = 1
    slots = (cfg.slots_base, cfg.slots_base + cfg.slots_size)

    def note(faults, phase):
        c["faults"] += len(faults)
        for f in faults:
            _count(c["faults_by_phase"], phase)
            _count(c["faults_by_region"], f"{f.op} {cfg.region_of(f.addr) or 'other'}")

    async def snapshot(batch, src, n):
        """SNAPSHOT of the staged image; True when its copy reported MEDIA (and must have)."""
        nonlocal tag
        tag += 1
        await tb.err_clear()             # STATUS.ERROR clear; ERR_CODE keeps the last error
        n_err0 = await tb.drv.read("ERR_COUNT")
        (cpl,), during = await submit(tb, [DeviceDriver.snapshot_desc(batch, src, n, tag)],
                                      f"batch {batch} SNAPSHOT")
        c["descriptors"] += 1
        assert int(cpl["status"]) == E.OK, tb.where(f"SNAPSHOT status {int(cpl['status'])}")
        n0 = len(tb.pmem.faults)
        await tb.drv.wait_snapshot_idle()
        during = during + tb.pmem.faults[n0:]
        note(during, "SNAPSHOT")
        err = await tb.drv.read("ERR_CODE")
        n_err = await tb.drv.read("ERR_COUNT") - n_err0
        flagged = bool(await tb.drv.read("STATUS") & 2)
        if during:
            assert flagged and n_err >= 1 and err == E.MEDIA and \
                await tb.drv.read64("ERR_VALUE") == batch, tb.where(
                    f"batch {batch}: SNAPSHOT copy met {during} but STATUS.ERROR {flagged}, "
                    f"{n_err} new errors, ERR_CODE {err}")
            assert await tb.drv.read64("MLP_EPOCH") != batch, tb.where(
                f"batch {batch}: a failed SNAPSHOT became the MLP slot")
            c["snapshot_failures"] += 1
            await tb.err_clear()
            return True
        assert not flagged and n_err == 0, tb.where(
            f"batch {batch}: SNAPSHOT without a fault, {n_err} new errors, ERR_CODE {err}")
        assert await tb.drv.read64("MLP_EPOCH") == batch, tb.where(
            f"batch {batch}: SNAPSHOT completed without becoming the MLP slot")
        slot = await tb.drv.read("MLP_SLOT")
        got = tb.mem.read(snap_slot_addr(cfg, slot - 1) + LINE, n)
        assert got == tb.mem.read(src, n), tb.where(f"batch {batch}: MLP slot {slot} differs "
                                                    "from the staged image")
        return False

    def resp():
        return (AxiResp.SLVERR, AxiResp.DECERR)[int(tb.rng.integers(2))]

    async def abort(batch, before):
        """Reset + RECOVER under recovery faults; retried clean if it reported MEDIA."""
        c["aborted_batches"] += 1
        await tb.power_on()
        if tb.rng.random() < p.p_recovery:     # one single-shot fault at a random burst
            where = ("log read", "table write", "superblock write")[int(tb.rng.integers(3))]
            op, lo, hi, k = {
                "log read": ("read", cfg.log_base, cfg.log_base + cfg.log_size, 40),
                "table write": ("write", cfg.table_base, cfg.table_base + cfg.table_size, 12),
                "superblock write": ("write", cfg.superblock_base, cfg.superblock_base + LINE,
                                     2)}[where]
            tb.pmem.add_fault(MediaFault(op=op, lo=lo, hi=hi, after=int(tb.rng.integers(k)),
                                         count=1, resp=resp(), name=f"recovery {where}"))
        n0 = len(tb.pmem.faults)
        c["recoveries"] += 1
        try:
            await tb.drv.recover()
            ok = True
        except DriverError:
            ok = False
        tb.pmem.clear_faults()
        during = tb.pmem.faults[n0:]
        note(during, "recovery")
        if ok:
            assert not during, tb.where(f"batch {batch}: recovery met {during} and completed")
            tb.model.recover()
            got = await tb.drv.read64("COMMITTED")
            assert got == tb.model.committed, tb.where(
                f"batch {batch}: COMMITTED {got} after recovery, model {tb.model.committed}")
        else:
            assert during, tb.where(f"batch {batch}: recovery failed without a fault")
            assert await tb.drv.read("ERR_CODE") == E.MEDIA, tb.where(
                f"batch {batch}: recovery failed without MEDIA")
            assert not await tb.drv.read("STATUS") & 4, tb.where(
                f"batch {batch}: READY after a failed recovery")
            c["recoveries_failed"] += 1
            await tb.err_clear()
            await tb.recover()              # without faults: must complete (model alongside)
        await restore_config(tb, dirs)
        if p.sabotage == "corrupt" and c["aborted_batches"] == 1:
            base = tb.tables[0][0]
            tb.mem.write(base + 5, bytes([tb.mem.read(base + 5, 1)[0] ^ 0x10]))   # RTL only
        check_tables(tb, before, f"batch {batch} aborted")

    try:
        for batch in range(1, p.batches + 1):
            descs, (s_lo, s_hi) = random_batch(tb, batch, tag)
            tag += len(descs)
            n_img = int(tb.rng.integers(100, 3000))
            img = tb.rng.integers(0, 256, n_img, dtype="u1").tobytes()
            src = tb.stage(img)
            s_hi = max(s_hi, src + n_img)
            before = model_tables(tb)
            # per batch p_b from p down to p / 30 (log-uniform), so that some batches get as
            # far as COMMIT and SNAPSHOT with faults armed
            p_b = p.p * 10 ** -float(tb.rng.uniform(0, 1.5))
            for attempt in ("faults", "clean"):
                if attempt == "faults":
                    for spec in (
                            MediaFault(op="rw", lo=cfg.table_base,
                                       hi=cfg.table_base + cfg.table_size, probability=p_b,
                                       resp=resp(), name="tables"),
                            MediaFault(op="write", lo=cfg.log_base,
                                       hi=cfg.log_base + cfg.log_size, probability=p_b,
                                       resp=resp(), name="log"),
                            MediaFault(op="rw", lo=s_lo, hi=s_hi, probability=p_b,
                                       resp=resp(), name="staging"),
                            MediaFault(op="write", lo=slots[0], hi=slots[1], probability=p_b,
                                       resp=resp(), name="slots"),
                            MediaFault(op="write", lo=cfg.superblock_base,
                                       hi=cfg.superblock_base + LINE,
                                       probability=min(0.25, 10 * p_b), resp=resp(),
                                       name="superblock")):
                        tb.pmem.add_fault(spec)
                log_failed = failed = False
                for d in descs:
                    kind = K(unpack_fields(DESC_FIELDS, d)["kind"])
                    if failed and kind != K.LOOKUP:
                        break            # after a MEDIA of UPDATE/COMMIT: abort the attempt
                    (cpl,), new = await submit(tb, [d], f"batch {batch} {kind.name}")
                    c["descriptors"] += 1
                    note(new, kind.name)
                    what = f"batch {batch} ({attempt}) {kind.name} tag {cpl['tag']}, faults {new}"
                    media, log_failed = check_reported(tb, kind, cpl, new, log_failed, what)
                    if media:
                        c["media_completions"] += 1
                        failed = True
                    else:
                        model_run(tb, [d])   # the model follows what the RTL completed
                if not failed:
                    # the snapshot's copy runs under the same rules (the slots and staging)
                    snap_failed = await snapshot(batch, src, n_img)
                    tb.pmem.clear_faults()
                    if snap_failed:
                        assert attempt == "faults"
                        assert not await snapshot(batch, src, n_img), tb.where(
                            f"batch {batch}: SNAPSHOT failed without faults")
                    await ClockCycles(dut.clk, 100)
                    check_tables(tb, model_tables(tb), f"batch {batch} ({attempt}) committed")
                    assert await tb.drv.read64("COMMITTED") == batch, tb.where(
                        f"batch {batch}: COMMITTED")
                    c["batches_committed"] += 1
                    break
                tb.pmem.clear_faults()
                assert attempt == "faults", tb.where(f"batch {batch} failed without faults")
                await ClockCycles(dut.clk, 200)
                check_log_trustworthy(tb, before, f"batch {batch} after MEDIA")
                await abort(batch, before)
    except AssertionError as e:
        failure = {"seed": tb.seed, "detail": str(e)}
    res = {"seed": tb.seed, "batches": p.batches, "p": p.p, "p_recovery": p.p_recovery,
           **c, "failure": failure, "wall_s": round(time.monotonic() - t0, 2)}
    Path(p.out).write_text(json.dumps(res, indent=1))
    dut._log.info(f"media-fault campaign: {json.dumps(res)}")
    assert failure is None, failure["detail"]
