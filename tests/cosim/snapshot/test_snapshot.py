"""cocotb tests of MLP snapshots (docs/training.md section 9) on the full device against the model.

One launch per build (the Verilator build of ``DeviceConfig()`` shared with
tests/cosim/device/test_device.py). As in tests/cosim/device/test_device.py, every host action goes to the RTL and
to ``sw_model.training.TrainingDevice`` (cosim.tb.device.DeviceTB); completions are compared
(all fields but ``cycles``), then, once ``STATUS.SNAP_BUSY`` = 0, the whole memory image and
the CSRs, plus ``MLP_EPOCH``, ``MLP_SLOT``, ``MLP_LAG`` and ``STATUS.SNAP_BUSY``.

The model executes a SNAPSHOT atomically (its copy is done when its completion is returned);
the RTL writes the completion at once and copies in the background. Final states are compared
after the copy; the ordering the contract requires of the background copy is checked on the
PMEM writes (every burst's byte segments with its AW, data and B cycles, ``log_writes``) and
on the CSRs while the copy runs. Expected values read off the contract (slot layout, header and
zlib CRC, error status/value, ordering) are asserted on the RTL directly as well, so the RTL
and the model must both match the contract, not only each other.

Guard bytes: before a snapshot the lines of its target slot are filled with a pattern through
the PMEM backdoor (both memories); the image comparison then shows any byte the RTL wrote that
the model did not, and the tests assert the pattern right after the payload and the other slot
unchanged.

Pytest launcher (end of file): MLP snapshot cosim tier: SNAPSHOT on the full TrainingCXL device under Verilator against the
golden model (above): copy over lengths x source offsets with guard bytes,
background overlap with later descriptors, a second SNAPSHOT and a k = 0 COMMIT waiting for the
one in flight, MLP_LAG refusals, BAD_EPOCH / SNAP_LENGTH / ADDR_RANGE, recovery's slot choice
(also with a corrupted slot and after a power failure during a copy) and the section-9 CSRs.

Same ``DeviceConfig()`` and Verilog as tests/cosim/device/test_device.py, so the Verilator build is
shared through the content-hash cache; one simulator run.
"""
import zlib

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.device_driver import DeviceDriver
from cosim.tb.device import E, K, DeviceTB, bags, commit, lookup, lr_q, setup_tables, update
from hw.config import DeviceConfig
from hw.encodings import SNAP_MAGIC

RING = 16
GUARD = 0xA5
SB_COMMITTED, SB_MLP_SLOT = 8, 16           # SB_FIELDS byte offsets
SNAPSHOT_BUSY = DeviceDriver.STATUS_SNAP_BUSY


# ---------------------------------------------------------------------------- contract helpers
def slot_geometry(cfg):
    """(slot A address, slot B address, capacity) from the contract's formula."""
    sb = (cfg.slots_size // 2) // 64 * 64
    return cfg.slots_base, cfg.slots_base + sb, sb - 64


def ref_header(epoch: int, payload: bytes) -> bytes:
    """Slot header line: magic, crc, epoch, length (LE), zero bytes; CRC (zlib) over the payload
    zero-padded to whole lines, then the header with crc = 0."""
    def hdr(crc):
        return (SNAP_MAGIC.to_bytes(4, "little") + crc.to_bytes(4, "little")
                + epoch.to_bytes(8, "little") + len(payload).to_bytes(4, "little") + bytes(44))
    crc = zlib.crc32(bytes(payload) + bytes(-len(payload) % 64) + hdr(0)) & 0xFFFFFFFF
    return hdr(crc)


def snap(epoch, src, length, tag=0) -> bytes:
    return DeviceDriver.snapshot_desc(epoch, src, length, tag)


# ---------------------------------------------------------------------------- bench helpers
async def start(dut, name, *, latency=16, stall=0.0, tables=True):
    tb = DeviceTB(dut, latency=latency, stall=stall, name=name)
    log_writes(tb)
    await tb.power_on()
    await tb.recover()
    if tables:
        await setup_tables(tb, [(0, 64, 16, 0.0), (1, 32, 64, 0.0)])
        await tb.set_lr(lr_q(tb, 0.1))
    await tb.configure_ring(RING)
    tb.wlog.clear()                           # drop the superblock formatting writes
    return tb


def log_writes(tb):
    """Record every PMEM write burst as its ``PendingWrite`` (byte segments + ``WriteRecord``
    with AW, data and B cycles; the B cycle is filled in at the acknowledgement) in
    ``tb.wlog``, by wrapping the B channel's ``push`` (called once per write burst)."""
    tb.wlog = []
    orig = tb.pmem.b.push

    def push(t, delay, values, pw):
        tb.wlog.append(pw)
        return orig(t, delay, values, pw)
    tb.pmem.b.push = push


async def set_lag(tb, k):
    await tb.drv.write("MLP_LAG", k)
    tb.model.csr_write("MLP_LAG", k)


async def check_all(tb, what):
    """Wait for the snapshot engine to be idle, then memory + CSRs (DeviceTB.check) and the
    section-9 CSRs equal to the model."""
    await tb.drv.wait_snapshot_idle()
    await tb.check(what)
    got = await tb.drv.mlp_state()
    m = tb.model
    want = {"epoch": m.mlp_epoch, "slot": m.mlp_slot, "lag": m.mlp_lag, "busy": int(m.snap_busy)}
    assert got == want, tb.where(f"{what}: MLP CSRs (model, RTL): "
                                 f"{ {k: (want[k], got[k]) for k in want if want[k] != got[k]} }")


def stage_params(tb, n, offset):
    """``n`` random payload bytes at a line + ``offset`` (junk around them); returns addr, bytes."""
    base = tb.salloc.alloc(n + 192)
    tb.poke(base, tb.rng.integers(0, 256, n + 192, dtype=np.uint8).tobytes())
    payload = tb.rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    a = base + 64 + offset
    tb.poke(a, payload)
    return a, payload


def guard(tb, slot_addr, n_lines):
    """Fill ``n_lines`` lines from ``slot_addr`` with the guard pattern (both memories)."""
    tb.poke(slot_addr, bytes([GUARD]) * 64 * n_lines)


def check_slot(tb, slot_addr, epoch, payload, guard_end, what):
    """Model-independent: header, payload, guard bytes after the payload up to ``guard_end``,
    on the RTL's memory."""
    mem = tb.mem
    got = mem.read(slot_addr, 64)
    assert got == ref_header(epoch, payload), tb.where(
        f"{what}: slot header {got.hex()} != contract {ref_header(epoch, payload).hex()}")
    assert mem.read(slot_addr + 64, len(payload)) == payload, tb.where(f"{what}: payload differs")
    end = slot_addr + 64 + len(payload)
    tail = mem.read(end, guard_end - end)
    assert tail == bytes([GUARD]) * len(tail), tb.where(
        f"{what}: bytes after the payload written (first at "
        f"{end + next(i for i, b in enumerate(tail) if b != GUARD):#x})")


def writes_to(tb, lo, hi):
    """``WriteRecord`` of every PMEM write burst writing a byte of [lo, hi), in data order."""
    return [pw.record for pw in tb.wlog
            if any(a < hi and lo < a + len(d) for a, d in pw.segments)]


def flip_writes(tb):
    a = tb.cfg.superblock_base + SB_MLP_SLOT
    return writes_to(tb, a, a + 8)


def commit_writes(tb):
    a = tb.cfg.superblock_base + SB_COMMITTED
    return writes_to(tb, a, a + 8)


# ---------------------------------------------------------------------------- 1. copy
LENGTHS = (0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 1000, 4113)
OFFSETS = (0, 1, 2, 31, 32, 33, 62, 63)
TIMING = {"lat1": (1, 0.0), "lat40_stall": (40, 0.3)}


@cocotb.test()
@cocotb.parametrize(timing=sorted(TIMING))
async def snap_sweep_lengths_and_offsets(dut, timing):
    """Seeded (length, source offset) combinations, including the edges (1, 63) and (65, 63),
    each SNAPSHOT(C+1) + COMMIT in one doorbell, slots alternating: the slot holds the contract's
    header (zlib CRC), the payload and untouched guard bytes after it, the other slot is
    unchanged, the superblock flip word = slot + 1; everything equals the model."""
    latency, stall = TIMING[timing]
    tb = await start(dut, f"sweep/{timing}", latency=latency, stall=stall, tables=False)
    cfg = tb.cfg
    slots = slot_geometry(cfg)[:2]
    rng = tb.rng
    combos = [(1, 63), (65, 63), (0, 17)] + [
        (int(rng.choice(LENGTHS)), int(rng.choice(OFFSETS))) for _ in range(6)]
    for n, (length, off) in enumerate(combos):
        e = tb.model.committed + 1
        target = n % 2
        sa, other = slots[target], slots[1 - target]
        lines = -(-length // 64)
        guard(tb, sa, lines + 3)
        other_before = tb.mem.read(other, 64 * 70)
        src, payload = stage_params(tb, length, off)
        what = f"combo {n}: length {length} offset {off} epoch {e} slot {target}"
        got = await tb.run([snap(e, src, length, tag=n), commit(e, tag=100 + n)], what)
        assert (got[0]["status"], got[0]["lines"], got[0]["batch"]) == (E.OK, lines, e), \
            tb.where(f"{what}: completion {got[0]}")
        await check_all(tb, what)
        check_slot(tb, sa, e, payload, sa + 64 * (lines + 3), what)
        assert tb.mem.read(other, 64 * 70) == other_before, tb.where(f"{what}: other slot written")
        assert tb.mem.read(cfg.superblock_base + SB_MLP_SLOT, 8) == (target + 1).to_bytes(8,
                                                                                       "little")
        assert (await tb.drv.read("MLP_SLOT"), await tb.drv.read64("MLP_EPOCH")) == (target + 1, e)


@cocotb.test()
async def snap_large_payload(dut):
    """A payload of 8201 lines and 37 bytes (525 KB: the line count has bit 13 set, above the
    sweep's lengths): the slot holds the contract's header, the whole payload and untouched
    guard bytes after it; everything equals the model."""
    tb = await start(dut, "large", latency=4, tables=False)
    sa = slot_geometry(tb.cfg)[0]
    length = 8201 * 64 + 37
    lines = -(-length // 64)
    guard(tb, sa, lines + 3)
    src, payload = stage_params(tb, length, 5)
    e = tb.model.committed + 1
    got = await tb.run([snap(e, src, length, tag=1), commit(e, tag=2)], "large snapshot")
    assert (got[0]["status"], got[0]["lines"]) == (E.OK, lines), tb.where(f"completion {got[0]}")
    await check_all(tb, "after the large snapshot")
    check_slot(tb, sa, e, payload, sa + 64 * (lines + 3), "large snapshot")


# ---------------------------------------------------------------------------- 2. background
@cocotb.test()
async def snap_background_overlap(dut):
    """A 16 KiB SNAPSHOT followed in the same doorbell by LOOKUP+LOG / UPDATE / LOOKUP / COMMIT,
    then a batch with a SNAPSHOT in its middle: completions in order and equal to the model,
    final memory equal; the SNAPSHOT's completion record is written before its slot header
    (completion at once, copy in the background)."""
    tb = await start(dut, "background", latency=40)
    cfg = tb.cfg
    a_slot, b_slot, _ = slot_geometry(cfg)
    src, payload = stage_params(tb, 16384 - 5, 5)
    descs = [snap(1, src, len(payload), tag=1)]
    for tid, tag in ((0, 2), (1, 4)):
        _, rows, dim = tb.tables[tid]
        o, i = bags(tb, 4, 4, rows)
        oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        descs.append(lookup(tid, 4, oa, ia, tb.out_area(4 * dim * 4), batch=1, tag=tag))
        g = tb.stage_i32(tb.rng.integers(-2**26, 2**26, (4, dim)))
        descs.append(update(tid, 4, oa, ia, g, batch=1, tag=tag + 1))
    descs.append(commit(1, tag=9))
    await tb.run(descs, "batch 1 behind a SNAPSHOT")
    cpl_addr = tb.drv.cpl_base                 # ring slot 0: the SNAPSHOT's completion
    await check_all(tb, "after batch 1")
    check_slot(tb, a_slot, 1, payload, a_slot + 64 + len(payload), "slot A")
    cw = writes_to(tb, cpl_addr, cpl_addr + 64)
    hw = writes_to(tb, a_slot, a_slot + 64)
    assert cw and hw and cw[0].aw_cycle < hw[-1].aw_cycle, tb.where(
        f"SNAPSHOT completion written at cycle {cw[0].aw_cycle if cw else None}, slot header at "
        f"{hw[-1].aw_cycle if hw else None}: the completion must not wait for the copy")
    later = [pw for pw in tb.wlog if pw.record.aw_cycle < hw[-1].aw_cycle
             and not cfg.slots_base <= pw.record.addr < cfg.slots_base + cfg.slots_size
             and pw.record.addr // 64 != cpl_addr // 64]
    dut._log.info(f"background: {len(later)} writes of later descriptors before the header")
    # batch 2: SNAPSHOT between LOOKUP and UPDATE
    _, rows, dim = tb.tables[1]
    o, i = bags(tb, 3, 4, rows)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    src2, payload2 = stage_params(tb, 3000, 40)
    descs = [lookup(1, 3, oa, ia, tb.out_area(3 * dim * 4), batch=2, tag=20),
             snap(2, src2, len(payload2), tag=21),
             update(1, 3, oa, ia, tb.stage_i32(tb.rng.integers(-2**26, 2**26, (3, dim))),
                    batch=2, tag=22),
             lookup(1, 3, oa, ia, tb.out_area(3 * dim * 4), log=False, batch=77, tag=23),
             commit(2, tag=24)]
    await tb.run(descs, "batch 2 with a SNAPSHOT inside")
    await check_all(tb, "after batch 2")
    check_slot(tb, b_slot, 2, payload2, b_slot + 64 + len(payload2), "slot B")
    check_slot(tb, a_slot, 1, payload, a_slot + 64 + len(payload), "slot A kept")


@cocotb.test()
async def snap_second_waits_for_first(dut):
    """[SNAPSHOT(1) 8 KiB, COMMIT(1), SNAPSHOT(2) 8 KiB, COMMIT(2)] in one doorbell: the second
    snapshot writes nothing to slot B before the first one's flip write is acknowledged."""
    tb = await start(dut, "second_waits", latency=30, tables=False)
    a_slot, b_slot, cap = slot_geometry(tb.cfg)
    s1, p1 = stage_params(tb, 8192, 0)
    s2, p2 = stage_params(tb, 8192 - 33, 9)
    guard(tb, b_slot, 130)
    await tb.run([snap(1, s1, len(p1), 1), commit(1, 2), snap(2, s2, len(p2), 3), commit(2, 4)],
                 "two SNAPSHOTs")
    await check_all(tb, "after two SNAPSHOTs")
    flips = flip_writes(tb)
    bw = writes_to(tb, b_slot, b_slot + 64 + cap)
    assert len(flips) == 2 and bw, tb.where(f"flips {flips}, slot B writes {len(bw)}")
    assert min(w.aw_cycle for w in bw) > flips[0].b_cycle, tb.where(
        f"slot B written from cycle {min(w.aw_cycle for w in bw)}, first snapshot done at "
        f"{flips[0].b_cycle}")
    check_slot(tb, a_slot, 1, p1, a_slot + 64 + len(p1), "slot A")
    check_slot(tb, b_slot, 2, p2, b_slot + 64 * 130, "slot B")


# ---------------------------------------------------------------------------- 3. COMMIT lag
@cocotb.test()
async def snap_commit_lag_waits(dut):
    """k = 0: COMMIT(1) behind an in-flight SNAPSHOT(1) waits for it (the committed word is
    written after the flip is acknowledged) and succeeds. k = 2 with b - P <= k: COMMIT does not
    wait for the SNAPSHOT in flight. k = 1, P = 2: COMMIT(3) proceeds, COMMIT(4) waits for the
    in-flight SNAPSHOT(4)."""
    tb = await start(dut, "commit_waits", latency=30, tables=False)
    await set_lag(tb, 0)
    s1, p1 = stage_params(tb, 16384, 3)
    got = await tb.run([snap(1, s1, len(p1), 1), commit(1, 2)], "k=0")
    assert [c["status"] for c in got] == [E.OK, E.OK], tb.where(f"k=0: {got}")
    await check_all(tb, "k=0")
    fl, cw = flip_writes(tb), commit_writes(tb)
    assert fl and cw and cw[-1].aw_cycle > fl[-1].b_cycle, tb.where(
        f"k=0: committed word written at {cw[-1].aw_cycle if cw else None}, snapshot done at "
        f"{fl[-1].b_cycle if fl else None}")

    await set_lag(tb, 2)
    tb.wlog.clear()
    s2, p2 = stage_params(tb, 16384, 0)
    await tb.run([snap(2, s2, len(p2), 3), commit(2, 4)], "k=2 no wait")
    await check_all(tb, "k=2")
    fl, cw = flip_writes(tb), commit_writes(tb)
    a_slot, b_slot, _ = slot_geometry(tb.cfg)
    hw = writes_to(tb, b_slot, b_slot + 64)
    assert cw and hw and cw[-1].aw_cycle < hw[-1].aw_cycle, tb.where(
        f"k=2, b - P = 1: COMMIT written at {cw[-1].aw_cycle if cw else None}, after the slot "
        f"header at {hw[-1].aw_cycle if hw else None} (waited although b - P <= k)")

    await set_lag(tb, 1)
    tb.wlog.clear()
    s3, p3 = stage_params(tb, 16384, 1)
    got = await tb.run([commit(3, 5), snap(4, s3, len(p3), 6), commit(4, 7)], "k=1")
    assert [c["status"] for c in got] == [E.OK] * 3, tb.where(f"k=1: {got}")
    await check_all(tb, "k=1")
    fl, cw = flip_writes(tb), commit_writes(tb)
    assert len(cw) == 2 and fl and cw[1].aw_cycle > fl[-1].b_cycle, tb.where(
        f"k=1: COMMIT(4) at {cw[-1].aw_cycle}, SNAPSHOT(4) done at "
        f"{fl[-1].b_cycle if fl else None}")


@cocotb.test()
async def snap_commit_lag_wait_counts_as_commit_cycles(dut):
    """k = 0: COMMIT(1) waits for the in-flight SNAPSHOT(1) of 64 KiB before it commits, and the
    wait counts in PERF_CYC_COMMIT (the command processor's COMMIT cycles, from its decode to
    its completion): it grows by at most the cycles from the SNAPSHOT's completion write's
    acknowledgement to the COMMIT's completion write (the COMMIT's whole turn) and by at least
    that less 4 x 30 + 32 cycles (its descriptor fetch, PMEM latency 30), all counted on the
    PMEM model's clock; the snapshot's flip is acknowledged more than 500 cycles after the
    SNAPSHOT completed (the COMMIT did wait). Written for mutant 67 of the 314cb09 draw
    (``hw/cmdproc/processor.py:346``: COMMIT_LAG, where the COMMIT waits, left out of the
    count)."""
    lat = 30
    tb = await start(dut, "commit_lag_cycles", latency=lat, tables=False)
    await set_lag(tb, 0)
    src, p = stage_params(tb, 65536, 5)
    c0 = await tb.drv.read("PERF_CYC_COMMIT")
    tb.wlog.clear()
    got = await tb.run([snap(1, src, len(p), 1), commit(1, 2)], "k=0")
    assert [c["status"] for c in got] == [E.OK, E.OK], tb.where(f"k=0: {got}")
    c1 = await tb.drv.read("PERF_CYC_COMMIT")
    cpl = writes_to(tb, tb.drv.cpl_base, tb.drv.cpl_base + 64 * RING)
    fl = flip_writes(tb)
    assert len(cpl) == 2 and fl, tb.where(f"{len(cpl)} completion writes, flips {fl}")
    turn = cpl[1].aw_cycle - cpl[0].b_cycle
    dut._log.info(f"PERF_CYC_COMMIT +{c1 - c0}, COMMIT turn {turn} cycles")
    assert fl[-1].b_cycle - cpl[0].b_cycle > 500, tb.where(
        f"the snapshot flipped {fl[-1].b_cycle - cpl[0].b_cycle} cycles after its completion")
    assert turn - (4 * lat + 32) <= c1 - c0 <= turn, tb.where(
        f"PERF_CYC_COMMIT grew by {c1 - c0}, the COMMIT's turn took {turn} cycles")
    await check_all(tb, "k=0")


@cocotb.test()
async def snap_commit_refused_mlp_lag(dut):
    """Without a snapshot: MLP_LAG reads 0xFFFFFFFF after reset (no bound, COMMITs proceed); k=1:
    COMMIT(2) is refused with MLP_LAG (value 2), nothing written, the batch stays open (LOOKUP+LOG
    and UPDATE of batch 2 still run), WRONG_BATCH is checked first; after SNAPSHOT(2) COMMIT(2)
    succeeds."""
    tb = await start(dut, "mlp_lag", latency=12)
    assert await tb.drv.read("MLP_LAG") == 0xFFFFFFFF, tb.where("MLP_LAG reset value")
    await tb.run([commit(1, 1)], "no bound")
    await set_lag(tb, 1)
    await check_all(tb, "k=1")
    got = await tb.run([commit(2, 2), commit(3, 3)], "refused")
    assert [(c["status"], c["err_value"], c["batch"]) for c in got] == [
        (E.MLP_LAG, 2, 2), (E.WRONG_BATCH, 3, 3)], tb.where(f"refused: {got}")
    await check_all(tb, "after MLP_LAG")
    _, rows, dim = tb.tables[0]
    o, i = bags(tb, 3, 3, rows)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    src, p = stage_params(tb, 500, 7)
    got = await tb.run([lookup(0, 3, oa, ia, tb.out_area(3 * dim * 4), batch=2, tag=4),
                        update(0, 3, oa, ia, tb.stage_i32(tb.rng.integers(-2**26, 2**26,
                                                                          (3, dim))),
                               batch=2, tag=5),
                        commit(2, 6), snap(2, src, len(p), 7), commit(2, 8)], "batch 2")
    assert [c["status"] for c in got] == [E.OK, E.OK, E.MLP_LAG, E.OK, E.OK], tb.where(f"{got}")
    await check_all(tb, "after batch 2")
    await set_lag(tb, 0xFFFFFFFF)
    await tb.run([commit(3, 9), commit(4, 10)], "no bound again")
    await check_all(tb, "end")


# ---------------------------------------------------------------------------- 4. bad input
@cocotb.test()
async def snap_descriptor_errors(dut):
    """BAD_EPOCH (e <= A, e > C+1), ADDR_RANGE (>= 2^addr_bits, before staging, past its end,
    length 0 at its end), SNAP_LENGTH (capacity + 1, 2^32 - 1), in the contract's order
    (cases failing two checks report the first); nothing written; then the edges that pass
    (payload ending at the staging end, length 0 at its last byte, ignored fields set)."""
    tb = await start(dut, "errors", latency=8, tables=False)
    cfg = tb.cfg
    _, _, cap = slot_geometry(cfg)
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    wide = 1 << cfg.addr_bits
    src, p = stage_params(tb, 100, 3)
    await tb.run([snap(1, src, 100, 1), commit(1, 2), commit(2, 3)], "A = 1, C = 2")
    await check_all(tb, "A = 1, C = 2")
    cases = [  # (name, descriptor, status, value)
        ("e == A", snap(1, src, 10), E.BAD_EPOCH, 1),
        ("e == 0", snap(0, src, 10), E.BAD_EPOCH, 0),
        ("e > C + 1", snap(4, src, 10), E.BAD_EPOCH, 4),
        ("e 2^64-1 + bad address", snap(2**64 - 1, wide, cap + 1), E.BAD_EPOCH, 2**64 - 1),
        (">= 2^addr_bits + too long", snap(3, wide, cap + 1), E.ADDR_RANGE, wide),
        ("2^64-1", snap(3, 2**64 - 1, 1), E.ADDR_RANGE, 2**64 - 1),
        ("staging + 2^addr_bits, length 0", snap(3, wide + s0, 0), E.ADDR_RANGE, wide + s0),
        ("too long, outside staging", snap(3, cfg.table_base, cap + 1), E.SNAP_LENGTH, cap + 1),
        ("length 2^32-1", snap(3, src, 2**32 - 1), E.SNAP_LENGTH, 2**32 - 1),
        ("before staging", snap(3, s0 - 1, 4), E.ADDR_RANGE, s0 - 1),
        ("in the slots region", snap(3, cfg.slots_base, 4), E.ADDR_RANGE, cfg.slots_base),
        ("one byte past the staging end", snap(3, s1 - 99, 100), E.ADDR_RANGE, s1 - 99),
        ("length 0 at the staging end", snap(3, s1, 0), E.ADDR_RANGE, s1),
    ]
    got = await tb.run([d for _, d, _, _ in cases], "error cases")
    for (name, _, code, value), c in zip(cases, got):
        assert (int(c["status"]), int(c["err_value"]), c["lines"]) == (int(code), value, 0), \
            tb.where(f"{name}: {E(int(c['status'])).name} {int(c['err_value']):#x}, contract "
                     f"{code.name} {value:#x}")
    await check_all(tb, "after the error cases")
    tail = bytes(range(100))
    tb.poke(s1 - 100, tail)
    d = DeviceTB.desc(kind=K.SNAPSHOT, tag=70, batch=3, data_addr=s1 - 100, length=100,
                      flags=0xFF, table=0xFFFF, n_bags=7, lr=9, offsets_addr=wide,
                      indices_addr=2**64 - 1)      # fields a SNAPSHOT ignores
    got = await tb.run([d, commit(3, 71), snap(4, s1 - 1, 0, 72)], "edges that pass")
    assert [(c["status"], c["lines"]) for c in got] == [(E.OK, 2), (E.OK, 0), (E.OK, 0)], \
        tb.where(f"edges: {got}")
    await check_all(tb, "after the edges")
    a_slot, b_slot, _ = slot_geometry(cfg)
    check_slot(tb, b_slot, 3, tail, b_slot + 64 + 100, "slot B (payload at the staging end)")
    assert tb.mem.read(a_slot, 64) == ref_header(4, b""), tb.where("empty snapshot header")


@cocotb.test()
async def snap_random_wide_fields_fail_their_checks(dut):
    """48 SNAPSHOT descriptors with fields drawn over their whole width, each failing one
    check of docs/training.md section 9 (worked out here from the contract, in its order):
    an epoch in [2, 2^64) with A = C = 0 (BAD_EPOCH, value e); epoch 1 and a source at or
    above 2^addr_bits (ADDR_RANGE, the address); a length over the slot capacity (SNAP_LENGTH,
    the length); a payload that starts before staging or runs past its end (ADDR_RANGE, the
    address). Random 32-bit tags, and the fields a SNAPSHOT ignores random too. Every
    completion equals the contract and the model, the memory image the model's; a good
    SNAPSHOT follows."""
    tb = await start(dut, "wide", latency=8, tables=False)
    cfg, rng = tb.cfg, tb.rng
    _, _, cap = slot_geometry(cfg)
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    wide = 1 << cfg.addr_bits

    def draw(lo, hi):
        return int(rng.integers(lo, hi, dtype=np.uint64))

    cases = []
    for k in range(48):
        e, addr, length = 1, draw(s0, s1), draw(0, cap + 1)
        if k % 4 == 0:
            e = draw(2, 1 << 64)
            want = (E.BAD_EPOCH, e)
        elif k % 4 == 1:
            addr = draw(wide, 1 << 64)
            want = (E.ADDR_RANGE, addr)
        elif k % 4 == 2:
            length = draw(cap + 1, 1 << 32)
            want = (E.SNAP_LENGTH, length)
        else:
            length = draw(1, cap + 1)
            addr = draw(s1 - length + 1, s1) if k % 8 == 3 else draw(s0 - length + 1, s0)
            want = (E.ADDR_RANGE, addr)
        d = DeviceTB.desc(kind=K.SNAPSHOT, tag=draw(0, 1 << 32), batch=e, data_addr=addr,
                          length=length, flags=draw(0, 256), table=draw(0, 1 << 16),
                          n_bags=draw(0, 1 << 32), lr=draw(0, 1 << 32),
                          offsets_addr=draw(0, 1 << 64), indices_addr=draw(0, 1 << 64))
        cases.append((d, want))
    got = await tb.run_in_doorbells([d for d, _ in cases], "wide fields")
    for (_, (code, value)), c in zip(cases, got, strict=True):
        assert (int(c["status"]), int(c["err_value"]), c["lines"]) == (int(code), value, 0), \
            tb.where(f"{E(int(c['status'])).name} {int(c['err_value']):#x}, contract "
                     f"{code.name} {value:#x}")
    await check_all(tb, "after the wide-field descriptors")
    src, payload = stage_params(tb, 100, 5)
    await tb.run([snap(1, src, len(payload), 1)], "a good SNAPSHOT")
    await check_all(tb, "after a good SNAPSHOT")


# ---------------------------------------------------------------------------- 5. recovery
@cocotb.test()
async def snap_recovery_picks_newest_valid(dut):
    """Snapshots 1 (A) and 2 (B) committed, then SNAPSHOT(4) (A) in the open batch: recovery
    ignores A (epoch 4 > C = 3) and picks B; a corrupted payload byte of B (PMEM backdoor) makes
    it pick the older A... after A is rewritten with epoch 3 it is the newest; both corrupted:
    none (0, 0). After recovery, the next snapshot goes to the other slot and an epoch <= the
    recovered one is BAD_EPOCH. Recovery writes no slot byte."""
    tb = await start(dut, "recovery", latency=16, tables=False)
    cfg = tb.cfg
    a_slot, b_slot, _ = slot_geometry(cfg)
    params = {}
    descs = []
    for e in (1, 2):
        s, params[e] = stage_params(tb, 300 + 70 * e, e)
        descs += [snap(e, s, len(params[e]), e), commit(e, 10 + e)]
    s, params[4] = stage_params(tb, 200, 11)
    await tb.run(descs + [commit(3, 13), snap(4, s, 200, 14)], "snapshots 1, 2; 4 open")
    await check_all(tb, "before the power cycle")

    async def power_recover(what, slot, epoch):
        await tb.power_on()
        slots_before = tb.mem.read(a_slot, 64 * 16) + tb.mem.read(b_slot, 64 * 16)
        await tb.recover()
        await check_all(tb, what)
        st = await tb.drv.mlp_state()
        assert (st["slot"], st["epoch"]) == (slot, epoch), tb.where(f"{what}: chose {st}, "
                                                                   f"contract {(slot, epoch)}")
        assert tb.mem.read(a_slot, 64 * 16) + tb.mem.read(b_slot, 64 * 16) == slots_before, \
            tb.where(f"{what}: recovery wrote a slot")
        want = None if slot == 0 else (epoch, params[epoch])
        assert tb.model.read_mlp_slot() == want, tb.where(f"{what}: payload")

    await power_recover("A has epoch 4 > C", 2, 2)
    await tb.configure_ring(RING)
    got = await tb.run([snap(2, s, 10, 20)], "epoch <= recovered")
    assert (got[0]["status"], got[0]["err_value"]) == (E.BAD_EPOCH, 2), tb.where(f"{got}")
    s3, params[3] = stage_params(tb, 129, 63)
    await tb.run([snap(3, s3, 129, 21)], "snapshot 3 into A (1 - active)")
    await check_all(tb, "snapshot 3")
    check_slot(tb, a_slot, 3, params[3], a_slot + 64 + 129, "slot A epoch 3")
    # corrupt B's payload: A (3) is newest anyway; then corrupt A: B is torn, nothing valid...
    flip = b_slot + 64 + int(tb.rng.integers(0, len(params[2])))
    tb.poke(flip, bytes([tb.mem.read(flip, 1)[0] ^ 0x10]))
    await power_recover("B torn, A newest", 1, 3)
    tb.poke(flip, bytes([tb.mem.read(flip, 1)[0] ^ 0x10]))       # B valid again
    fa = a_slot + 64 + 128                                          # A's last payload byte
    tb.poke(fa, bytes([tb.mem.read(fa, 1)[0] ^ 0x01]))
    await power_recover("A torn: falls back to B", 2, 2)
    tb.poke(flip, bytes([tb.mem.read(flip, 1)[0] ^ 0x10]))
    await power_recover("both torn", 0, 0)
    await tb.configure_ring(RING)
    s5, params[1] = stage_params(tb, 64, 0)
    await tb.run([snap(1, s5, 64, 30)], "after none: epoch 1, slot A")
    await check_all(tb, "after none")
    assert await tb.drv.read("MLP_SLOT") == 1


@cocotb.test()
async def snap_large_epochs(dut):
    """Batch numbers past 2^32 + 2^27 (the superblock's committed batch set by backdoor on both
    sides, then recovered): SNAPSHOT and COMMIT of the next batch, a power cycle, and recovery
    reports that epoch in MLP_EPOCH and its slot; everything equals the model."""
    tb = await start(dut, "large_epochs", latency=8, tables=False)
    c = (1 << 32) + (1 << 27) + 5
    await tb.power_on()
    tb.poke(tb.cfg.superblock_base + SB_COMMITTED, c.to_bytes(8, "little"))
    assert await tb.recover() == c
    await tb.configure_ring(RING)
    e = c + 1
    src, payload = stage_params(tb, 200, 3)
    await tb.run([snap(e, src, len(payload), tag=1), commit(e, tag=2)], f"snapshot {e:#x}")
    await check_all(tb, "after the snapshot of a large epoch")
    await tb.power_on()
    assert await tb.recover() == e
    await check_all(tb, "after recovery")
    st = await tb.drv.mlp_state()
    assert (st["slot"], st["epoch"]) == (1, e), tb.where(f"chose {st}, contract (1, {e:#x})")


@cocotb.test()
async def snap_power_failure_during_copy(dut):
    """Power fails while a 64 KiB SNAPSHOT of epoch C (<= C, so recovery would take it) is being
    copied into slot B: the torn slot fails its CRC and recovery picks slot A; the model,
    recovering the RTL's crash image, chooses the same."""
    tb = await start(dut, "power_fail", latency=40, tables=False)
    a_slot, b_slot, _ = slot_geometry(tb.cfg)
    s1, p1 = stage_params(tb, 700, 5)
    await tb.run([snap(1, s1, 700, 1), commit(1, 2), commit(2, 3)], "A = 1, C = 2")
    await check_all(tb, "A = 1")
    guard(tb, b_slot, 4)
    s2, p2 = stage_params(tb, 65536, 0)
    await tb.ring_raw([snap(2, s2, len(p2), 4)])
    for _ in range(200):
        if await tb.drv.read("CPL_HEAD") == tb.drv.tail:
            break
        await ClockCycles(dut.clk, 4)
    st = await tb.drv.mlp_state()
    assert st["busy"] == 1 and (st["slot"], st["epoch"]) == (1, 1), tb.where(
        f"completion written but STATUS/MLP_* {st}: copy not in flight or MLP_* updated early")
    await ClockCycles(dut.clk, 150)
    assert await tb.drv.read("STATUS") & SNAPSHOT_BUSY, tb.where("copy already done")
    await tb.power_on()
    tb.model.mem = tb.rtl_image()             # the model recovers the RTL's crash image
    await tb.recover()
    await check_all(tb, "after the power failure")
    st = await tb.drv.mlp_state()
    assert (st["slot"], st["epoch"]) == (1, 1), tb.where(f"recovered {st}, contract A (1)")
    assert tb.model.read_mlp_slot() == (1, p1)


# ---------------------------------------------------------------------------- 6. CSRs
@cocotb.test()
async def snap_csrs(dut):
    """MLP_LAG resets to 0xFFFFFFFF and reads back; MLP_SLOT / MLP_EPOCH_LO/HI are read-only
    (CSR_RO); during a 64 KiB copy STATUS.SNAP_BUSY = 1 and MLP_EPOCH/MLP_SLOT keep the previous
    snapshot's values; afterwards SNAP_BUSY = 0 and they name the new one."""
    tb = await start(dut, "csrs", latency=24, tables=False)
    assert (await tb.drv.mlp_state()) == {"epoch": 0, "slot": 0, "lag": 0xFFFFFFFF, "busy": 0}
    await set_lag(tb, 0x12345)
    assert await tb.drv.read("MLP_LAG") == 0x12345
    for name in ("MLP_SLOT", "MLP_EPOCH_LO", "MLP_EPOCH_HI", "STATUS"):
        await tb.csr_bad_write(tb.map.offset(name), E.CSR_RO)
    await check_all(tb, "after CSR misuse")
    s, p = stage_params(tb, 65536, 0)
    await tb.ring_raw([snap(1, s, len(p), 1)])
    await tb.drv.wait_head(tb.drv.tail)
    st = await tb.drv.mlp_state()
    assert st == {"epoch": 0, "slot": 0, "lag": 0x12345, "busy": 1}, tb.where(f"during: {st}")
    await tb.finish("64 KiB snapshot")
    cyc = await tb.drv.wait_snapshot_idle()
    dut._log.info(f"64 KiB copy finished {cyc} cycles after its completion was read")
    await check_all(tb, "after the copy")
    assert (await tb.drv.mlp_state())["epoch"] == 1
    await tb.power_on()
    assert (await tb.drv.read("MLP_LAG")) == 0xFFFFFFFF, tb.where("MLP_LAG after reset")
    await tb.recover()
    await check_all(tb, "recovered")
    assert (await tb.drv.mlp_state())["slot"] == 0, tb.where("epoch 1 > C = 0 must be ignored")


# ---- pytest launcher ----------------------------------------------------------------------------
MIN_TESTS = 14     # cocotb tests in tests/cosim/snapshot/test_snapshot.py, parametrized variants counted


@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_snapshot_cosim(device_build, seed, tmp_path):
    """All snapshot cocotb tests pass (completions, memory image, CSRs equal to the model; the
    contract's layout, ordering and error values asserted on the RTL)."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
