"""cocotb tests of the full device top (hw/top.py) against the golden model (sw_model.training).

One launch per build (one Verilator build of ``DeviceConfig()``, shared with
the crash campaign). Every test drives the RTL and ``TrainingDevice`` in step (cosim.tb.device)
and compares completions (all fields but ``cycles``), the whole memory image (tables, undo-log
slots, superblock, staging) and the error/ring/IRQ CSRs.

Tests: training batches under three PMEM timings (latency 1, 40 with 30 % stalls on every AXI
channel, 200); saturation and same-row repeats; rows of one set of the UPDATE engine's row
tracker (its ways and victim CAM full, repeats joining), its entries under long joins and reuse
(rows of one and two lines), joins in the cycles of their entry's acknowledgements, an item
waiting more than 2^18 cycles for an entry (PERF_UPD_STALLS), a row re-logged while its idle
entry of the previous UPDATE holds it, and two crowded sets with random repeats; each
completion's ``cycles`` within its doorbell's cycles; the gradient stage
reading ahead of a blocked row stage until the delta ring is full; one row in 320 bags (the
write stage waiting for each bag's delta line); recovery of an undo log longer than the recovery
scan's window (after a power cycle, and by RECOVER alone), and with rollback writes slower than
the record reads; two aborted attempts of a batch with logged-set overflow (re-logging, recovery
epoch); re-logging a row whose previous update is still in flight (a bug this test found: the
record held the row from before that update), also in a later way of its tracker set and in
victims of the tracker's CAM; a LOOKUP+LOG repeating a row just inserted into each way of its
logged set (decided from the set's bypass); logged-set sets one index bit apart (one full, a
row in each neighbour: no overflow); recovery from an epoch with bit 63 set; SNAPSHOT
lengths at the slot capacity (over it refused; at it and just under it accepted, the 256 MiB
copy cut by a power failure and recovered); doorbell before recovery and CSR misuse; a
sweep of every register of the map (the ring's included); ring errors (RING_CONFIG,
DOORBELL_RANGE, RING_OVERFLOW, CSR_BUSY for ring registers and RECOVER while busy;
RING_CONFIG's value for a size with bit 26 set); a ring of 8192 slots taking 4096 descriptors
in one doorbell; every descriptor-level error followed by recovery of the partly
applied UPDATEs; the command processor's width checks before the engine checks (completions also
checked against the contract's expected status/value); LOOKUP/UPDATE descriptors with fields
drawn over their whole width, each failing a check; the interrupt line; addresses, batch
numbers, epochs, tags and table ids across their whole ranges (two batches with snapshots past
2^40, a rollback).

Not covered here: ``LOG_FULL`` (the default log region has 1.8 M slots; a configuration with a
136-slot log runs it in tests/cosim/device/test_device_log_full.py and, under crashes, in
tests/cosim/crash/test_crash.py::test_crash_extended_log_full_smoke) and ``MEDIA`` (media
faults: tests/cosim/media).

Pytest launcher (end of file): Device-top cosim tier: the full TrainingCXL device under Verilator against the golden model
(above): training batches (LOOKUP+LOG, UPDATE, COMMIT, recovery) with PMEM
latency and AXI stall variants, every documented bad input (descriptor, doorbell, ring and CSR
errors, partial UPDATE rolled back by recovery) and the interrupt line.

One Verilator build of ``DeviceConfig()`` (the same as the crash campaign's, so the build is
shared through the content-hash cache), one simulator run.
"""
import collections
import copy

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, RisingEdge

from cosim import build as cb
from cosim.device_driver import DeviceDriver
from cosim.tb.config import BenchConfig
from cosim.tb.device import E, K, DeviceTB, bags, commit, lookup, lr_q, setup_tables, update
from hw.config import REGIONS, DeviceConfig
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, LOG_SLOT_BYTES, N_TABLES, SB_FIELDS,
                          pack_fields)
from sw_model.training import snap_capacity, snap_slot_addr

RING = 16


def set0_rows(cfg, n):
    """``n`` rows of table 0 in logged-set set 0 (docs/training.md section 5: h = (row ^ row >> S
    ^ table) & (sets - 1); row a*sets + a maps to a ^ a = 0 for a < sets)."""
    sets = cfg.log_set_sets
    assert n <= sets, (n, sets)
    rows = [a * sets + a for a in range(n)]
    s = sets.bit_length() - 1
    assert all((r ^ (r >> s)) & (sets - 1) == 0 for r in rows), rows
    return rows


def batch_descs(tb, batch, tag0, *, nolog_tid=None, desc_lr_tid=None, own_bags_tid=None,
                grad_scale=1.0, n_bags=(2, 6), max_len=5):
    """A training batch over every programmed table: LOOKUP+LOG each, one LOOKUP without LOG
    (garbage batch id), UPDATE each (table ``own_bags_tid`` and a random half of the others with
    bags of their own, so the synchronous logging path runs), COMMIT."""
    rng = tb.rng
    looks, upds = [], []
    tag = tag0
    tids = sorted(tb.tables)
    for tid in tids:
        _, rows, dim = tb.tables[tid]
        nb = int(rng.integers(*n_bags))
        o, i = bags(tb, nb, max_len, rows, hot=max(2, rows // 4))
        oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        looks.append(lookup(tid, nb, oa, ia, tb.out_area(nb * dim * 4), batch=batch, tag=tag))
        tag += 1
        if tid == own_bags_tid or rng.random() < 0.5:
            o, i = bags(tb, nb, max_len, rows, hot=max(2, rows // 3))
            oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        g = (rng.standard_normal((nb, dim)) * grad_scale * (1 << tb.cfg.frac_bits))
        g = np.clip(g, -2**31, 2**31 - 1).astype(np.int32)
        lr = lr_q(tb, float(rng.uniform(0.01, 0.3))) if tid == desc_lr_tid else None
        upds.append(update(tid, nb, oa, ia, tb.stage_i32(g), batch=batch, tag=tag, lr=lr,
                           nolog=tid == nolog_tid))
        tag += 1
    tid = int(rng.choice(tids))
    _, rows, dim = tb.tables[tid]
    o, i = bags(tb, 3, 4, rows)
    infer = lookup(tid, 3, tb.stage_u32(o), tb.stage_u32(i), tb.out_area(3 * dim * 4),
                   log=False, batch=int(rng.integers(0, 2**63)), tag=tag)
    return looks + [infer] + upds + [commit(batch, tag=tag + 1)], tag + 2


async def run_split(tb, descs, what):
    """Submit in two doorbells split at a random point (ring wraps over batches)."""
    k = int(tb.rng.integers(1, len(descs)))
    return await tb.run(descs[:k], what) + await tb.run(descs[k:], what)


# ---------------------------------------------------------------------------- 1. functional
TIMING = {"lat1": (1, 0.0), "lat40_stall": (40, 0.3), "lat200": (200, 0.0)}


@cocotb.test()
@cocotb.parametrize(timing=sorted(TIMING))
async def device_training_batches_match_model(dut, timing):
    """Format a fresh device, four tables (dims 16/32/64/128; one with rows near the rails and
    large gradients so LOOKUP and UPDATE saturate), three batches of LOOKUP+LOG / LOOKUP
    without LOG / UPDATE (CSR lr, DESC_LR, one NOLOG) / COMMIT; after each batch everything
    equals the model. Then a reset + recovery with nothing to roll back."""
    latency, stall = TIMING[timing]
    tb = DeviceTB(dut, latency=latency, stall=stall, name=f"functional/{timing}")
    await tb.power_on()
    await tb.recover()
    await tb.check("after format")
    await setup_tables(tb, [(0, 200, 16, 0.0), (3, 96, 32, 0.0), (5, 40, 64, 0.2),
                            (7, 24, 128, 0.0)])
    await tb.set_lr(lr_q(tb, float(tb.rng.uniform(0.01, 0.2))))
    await tb.configure_ring(RING)
    tag = 1
    cpls = []
    for b in range(1, 4):
        descs, tag = batch_descs(tb, b, tag, desc_lr_tid=3, nolog_tid=7 if b == 2 else None,
                                 own_bags_tid=0)
        cpls += await run_split(tb, descs, f"batch {b}")
        await tb.check(f"after batch {b}")
    assert tb.model.committed == 3
    # the run exercised what it claims to (model-independent sanity)
    ups = [c for c in cpls if c["kind"] == K.UPDATE]
    looks = [c for c in cpls if c["kind"] == K.LOOKUP]
    assert sum(c["sat"] for c in cpls) > 0, tb.where("no saturation")
    assert sum(c["log_records"] for c in ups) > 0, tb.where("no UPDATE logged synchronously")
    assert sum(c["log_records"] for c in looks) > 0, tb.where("no LOOKUP records")
    assert sum(c["rows"] for c in ups) > 20, tb.where("few rows updated")
    await tb.power_on()
    await tb.recover()
    await tb.check("after reset + recovery (nothing to roll back)")


@cocotb.test()
async def device_completion_cycles_within_the_doorbells_cycles(dut):
    """Two training batches (LOOKUP+LOG, LOOKUP without LOG, UPDATE, COMMIT) and a doorbell of
    descriptors of unknown kinds, after a power-on and recovery: every completion's ``cycles``
    (command accept to completion, docs/architecture.md) is at least 1, and those of one
    doorbell add up to at most the cycles the testbench counted from writing its descriptors
    to reading its completions (the descriptors run one after another). The other tests
    compare completions with the model in every field but ``cycles``. Written for mutant 76
    of the 314cb09 draw (``hw/cmdproc/processor.py:348``: the count never restarts at FETCH,
    so a completion reports the cycles since reset)."""
    tb = DeviceTB(dut, latency=8, name="cpl_cycles")
    rng = tb.rng
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, [(0, 200, 16, 0.0), (3, 96, 32, 0.0)])
    await tb.set_lr(lr_q(tb, 0.1))
    await tb.configure_ring(RING)
    doorbells, tag = [], 1
    for b in (1, 2):
        descs, tag = batch_descs(tb, b, tag)
        doorbells.append((f"batch {b}", descs))
    doorbells.append(("unknown kinds", [tb.desc(kind=int(k), tag=int(t)) for k, t in
                                        zip(rng.integers(5, 256, 6), rng.integers(0, 1 << 32, 6))]))
    for what, descs in doorbells:
        t0 = tb.drv.pmem.cycle
        got = await tb.run(descs, what)
        took = tb.drv.pmem.cycle - t0
        cyc = [int(c["cycles"]) for c in got]
        assert min(cyc) >= 1 and sum(cyc) <= took, tb.where(
            f"{what}: completion cycles {cyc} (sum {sum(cyc)}), {took} cycles counted by the "
            f"testbench from writing the descriptors to reading the completions")
    await tb.check("after the doorbells")


@cocotb.test()
async def device_saturation_and_repeats(dut):
    """Rows near both rails: LOOKUPs that saturate, UPDATEs with large gradients that clamp,
    the same row many times in one UPDATE (same-row hazards), back to back without a COMMIT in
    between doorbells; ``sat`` equals the model and is non-zero."""
    tb = DeviceTB(dut, latency=24, stall=0.1, name="saturation")
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, [(1, 8, 16, 0.6), (2, 6, 128, 0.5)])
    await tb.set_lr(lr_q(tb, 0.75))
    await tb.configure_ring(RING)
    rng = tb.rng
    descs = []
    for tid in (1, 2):
        _, rows, dim = tb.tables[tid]
        o = np.array([0, 6, 12, 20], np.uint32)
        i = rng.integers(0, rows, 20).astype(np.uint32)
        oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        descs.append(lookup(tid, 3, oa, ia, tb.out_area(3 * dim * 4), batch=1, tag=tid))
        g = rng.integers(-2**31, 2**31, (3, dim)).astype(np.int32)
        descs.append(update(tid, 3, oa, ia, tb.stage_i32(g), batch=1, tag=10 + tid))
        # one row repeated 9 times in a single bag, then in every bag
        o2 = np.array([0, 9, 10, 11], np.uint32)
        i2 = np.full(11, int(rng.integers(0, rows)), np.uint32)
        g2 = rng.integers(-2**30, 2**30, (3, dim)).astype(np.int32)
        descs.append(update(tid, 3, tb.stage_u32(o2), tb.stage_u32(i2), tb.stage_i32(g2),
                            batch=1, tag=20 + tid, lr=lr_q(tb, 1.5)))
    got = await tb.run(descs, "saturating batch")
    assert sum(c["sat"] for c in got) > 0, tb.where("no lane saturated")
    await tb.check("after saturating descriptors")
    await tb.run([commit(1, tag=99)], "commit")
    await tb.check("after commit")


async def _sparse_table(tb, n_rows, dim, rows, *, lr):
    """Power on and recover, then table 0 of ``n_rows`` rows of ``dim`` at a fresh base with
    only ``rows`` written (seeded random values), the LR ``lr`` and the ring configured."""
    await tb.power_on()
    await tb.recover()
    base = tb.talloc.alloc(n_rows * dim * 4)
    await tb.set_table(0, base, n_rows, dim)
    for r in rows:
        tb.poke(base + r * dim * 4, tb.rng.integers(-2**26, 2**26, dim).astype("<i4").tobytes())
    await tb.set_lr(lr_q(tb, lr))
    await tb.configure_ring(RING)


@cocotb.test()
@cocotb.parametrize(dim=[16, 128])
async def device_update_rows_of_one_tracker_set(dut, dim):
    """40 rows of one set of the UPDATE engine's row tracker (``row_set``) in one UPDATE at
    PMEM latency 200: 8 rows fill the set's ways, the next 16 all victims, each twice in a
    row (the repeat joins the entry while its row is in flight: a repeat that read the row
    instead would read it before the first update's write), the last 16 wait for a free
    entry (PERF_UPD_STALLS counts at least the 200-cycle write latency they wait), then every
    row again in a random order; the tables, log and completions equal the model."""
    from hw.update.rows import row_set
    tb = DeviceTB(dut, latency=200, name=f"tracker_set/dim{dim}")
    cfg = tb.cfg
    set_bits = (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    ways, nv = cfg.upd_ways, cfg.upd_victims
    n = ways + nv + 16
    s = int(tb.rng.integers(0, 1 << set_bits))
    # rows spread over a table of up to 2^26 rows (only these are written), so the tracker's
    # entries and the victim CAM hold rows with every bit of the row number moving
    n_rows = min(1 << 26, (cfg.table_size // 2) // (dim * 4))
    his = [int(h) for h in tb.rng.choice(n_rows >> set_bits, n, replace=False)]
    rows = [(h << set_bits) | (s ^ row_set(h << set_bits, set_bits)) for h in his]
    assert len({row_set(r, set_bits) for r in rows}) == 1 and max(rows) < n_rows, rows
    await _sparse_table(tb, n_rows, dim, rows, lr=0.1)
    order = (rows[:ways] + [r for r in rows[ways:ways + nv] for _ in range(2)]
             + rows[ways + nv:] + [rows[i] for i in tb.rng.permutation(n)])
    idx = np.array(order, np.uint32)
    nb = 8
    o = (np.arange(nb + 1) * (len(idx) // nb)).astype(np.uint32)
    assert o[-1] == len(idx), o
    oa, ia = tb.stage_u32(o), tb.stage_u32(idx)
    g = (tb.rng.standard_normal((nb, dim)) * (1 << cfg.frac_bits)).astype(np.int32)
    cpls = await tb.run([lookup(0, nb, oa, ia, tb.out_area(nb * dim * 4), batch=1, tag=1),
                         update(0, nb, oa, ia, tb.stage_i32(g), batch=1, tag=2),
                         commit(1, tag=3)], "one tracker set")
    await tb.check("after the UPDATE of one tracker set")
    # the 25th distinct row waits for a free entry: at least one write round trip (latency
    # 200) passes before the first row's write is acknowledged; the wait is counted in
    # PERF_UPD_STALLS (cycles an item waited in the hazard check) within the UPDATE's cycles
    stalls = await tb.drv.read("PERF_UPD_STALLS")
    assert 200 <= stalls <= cpls[1]["cycles"], tb.where(
        f"PERF_UPD_STALLS {stalls}, UPDATE cycles {cpls[1]['cycles']}")


async def _nolog_update(tb, idx, nb, dim, what):
    """One NOLOG UPDATE of table 0 (batch 1, tag 1): the items ``idx`` in ``nb`` bags of equal
    size, a random gradient of ``dim`` per bag; then the tables are checked against the
    model."""
    o = np.linspace(0, len(idx), nb + 1).astype(np.uint32)
    g = (tb.rng.standard_normal((nb, dim)) * (1 << tb.cfg.frac_bits)).astype(np.int32)
    await tb.run([update(0, nb, tb.stage_u32(o), tb.stage_u32(idx), tb.stage_i32(g), batch=1,
                         tag=1, nolog=True)], what)
    await tb.check("after the UPDATE")


async def _one_tracker_set_and_others(tb, dim, n_gap):
    """A table of 2^20 rows of ``dim`` with two row lists, staged: ``mine``, the ways plus the
    victims of one random row tracker set (``row_set``) in rows of that set, and ``gap``,
    ``n_gap`` rows spread evenly over the other sets."""
    from hw.update.rows import row_set
    cfg = tb.cfg
    set_bits = (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    n_mine, n_rows = cfg.upd_ways + cfg.upd_victims, 1 << 20
    s = int(tb.rng.integers(0, 1 << set_bits))
    his = [int(h) for h in tb.rng.choice(n_rows >> set_bits, n_mine + n_gap, replace=False)]
    others = [t for t in range(1 << set_bits) if t != s]

    def in_set(h, t):
        return (h << set_bits) | (t ^ row_set(h << set_bits, set_bits))
    mine = [in_set(h, s) for h in his[:n_mine]]
    gap = [in_set(h, others[k % len(others)]) for k, h in enumerate(his[n_mine:])]
    assert {row_set(r, set_bits) for r in mine} == {s} and s not in {row_set(r, set_bits)
                                                                      for r in gap}
    await _sparse_table(tb, n_rows, dim, mine + gap, lr=0.01)
    return mine, gap


@cocotb.test()
async def device_update_tracker_entries_long_joins_and_reuse(dut):
    """One NOLOG UPDATE at PMEM latency 300, dim 16 (one line per row) on the row tracker's
    entries (``row_set``): the 8 ways of one set take a row each, way 5's row then repeats 100
    times; the 16 victims take a row each (twice in a row), victim 10's row then repeats 300
    times (line counters past 64 and 256); then 1100 rows spread evenly over the other sets
    (victim 10's row again before every 25th)
    (more lines than the 1024-line forwarding ring: a row still counted in flight would later
    be forwarded a line overwritten since); then the 24 rows again in a random order. Tables
    equal the model; PERF_UPD_STALLS is 0, since no set ever has more rows in flight than its
    ways plus the victims (capacity, docs of ``RowTracker``). Written for the mutants of
    ``hw/update/row_cam.py`` 7 (victim 7 freed at count 3, not 1), 33 (victims always full)
    and 92 (bit 8 of victim 10's count stuck at 0), and ``rows.py:218`` 11 (bit 6 of way 5's
    acknowledged count written as 0)."""
    tb = DeviceTB(dut, latency=300, name="tracker_reuse")
    cfg = tb.cfg
    dim, ways, nv = 16, cfg.upd_ways, cfg.upd_victims
    mine, gap = await _one_tracker_set_and_others(tb, dim, 1100)
    w_rows, v_rows = mine[:ways], mine[ways:]
    # victim 10's row also every 25th row of the gap: it is met again while its 300 lines
    # are still being written
    gap_v10 = [r for k, g_row in enumerate(gap) for r in ([v_rows[10]] * (k % 25 == 0) + [g_row])]
    order = (w_rows + [w_rows[5]] * 100 + [v for v in v_rows for _ in range(2)]
             + [v_rows[10]] * 300 + gap_v10 + [mine[i] for i in tb.rng.permutation(ways + nv)])
    await _nolog_update(tb, order, 8, dim, "tracker entries reused")
    stalls = await tb.drv.read("PERF_UPD_STALLS")
    assert stalls == 0, tb.where(f"PERF_UPD_STALLS {stalls}: a row waited for an entry")


@cocotb.test()
@cocotb.parametrize(other=[8, 32])
async def device_update_tracker_crowded_sets_random_repeats(dut, other):
    """One NOLOG UPDATE at PMEM latency 8, dim 16, of 3000 items over 16 rows in each of two
    row tracker sets (``row_set``): a set S with bit 3 set, and S ^ ``other``; each item is
    one of the last 8 items again (half of them) or any of the 32 rows, so both sets' ways and
    the victims are taken, freed and joined in the cycles after other entries' writes are
    acknowledged. Tables equal the model. Written for the mutants 29 and 39 of the tracker's
    per-way acknowledgement bypass (last cycle's ``dec`` counted for the looked-up set) in
    ``hw/update/rows.py``: in the free test behind the victim allocation, of way 1 (29) and
    way 4 (39), the looked-up set is taken as S ^ 8 or S ^ 32 (a bit of its XOR fold forced
    or inverted), so a row is taken by a victim and a way, or by neither."""
    from hw.update.rows import row_set
    tb = DeviceTB(dut, latency=8, name=f"tracker_crowded/S^{other}")
    cfg = tb.cfg
    dim, set_bits = 16, (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    n_rows, per_set, n_items = 1 << 16, 16, 3000
    s = int(tb.rng.integers(0, 1 << set_bits)) | 8
    hs = tb.rng.choice(n_rows >> set_bits, 2 * per_set, replace=False)
    rows = [(int(h) << set_bits) | (t ^ row_set(int(h) << set_bits, set_bits))
            for t, hh in zip((s, s ^ other), hs.reshape(2, per_set)) for h in hh]
    await _sparse_table(tb, n_rows, dim, rows, lr=0.01)
    order = []
    for _ in range(n_items):
        again = order and tb.rng.random() < 0.5
        order.append(order[-int(tb.rng.integers(1, min(8, len(order)) + 1))] if again
                     else rows[int(tb.rng.integers(0, len(rows)))])
    await _nolog_update(tb, order, 8, dim, "crowded tracker sets")


@cocotb.test()
async def device_update_victim_joins_of_two_line_rows(dut):
    """The tracker-entry case above with rows of two lines (dim 32): one NOLOG UPDATE at PMEM
    latency 300 where the 8 ways of one row tracker set take a row each and the 16 victims a
    row each, twice in a row (the repeat joins its entry, adding two lines); then 600 rows of
    the other sets (1200 lines, more than the 1024-line forwarding ring), then the 24 rows
    again in a random order. Tables equal the model. Written for mutant 3 of
    ``hw/update/row_cam.py:131`` (bit 0 of the line count forced 1 in victim 6's join: the
    entry counts three lines for two and never frees, so its row's repeat after the gap is
    forwarded an overwritten line); the one-line test above cannot show it."""
    tb = DeviceTB(dut, latency=300, name="victim_joins_dim32")
    cfg = tb.cfg
    dim, ways, nv = 32, cfg.upd_ways, cfg.upd_victims
    mine, gap = await _one_tracker_set_and_others(tb, dim, 600)
    order = (mine[:ways] + [v for v in mine[ways:] for _ in range(2)] + gap
             + [mine[i] for i in tb.rng.permutation(ways + nv)])
    await _nolog_update(tb, order, 8, dim, "victim joins of two-line rows")


@cocotb.test()
@cocotb.parametrize(run=[501, 502, 503])
async def device_update_tracker_joins_while_acknowledged(dut, run):
    """One NOLOG UPDATE at PMEM latency 300, dim 16 (one line per row) on one row tracker set
    (``row_set``): its 8 ways take a row each and way 7's row repeats 300 times at once (its
    entry stays in flight while it counts more than 256 acknowledged lines); then the 8 rows
    again, the 16 victims take a row each, twice in a row, and victim 4's row repeats ``run``
    times (joins in the cycles its earlier lines are acknowledged: a join and an
    acknowledgement of one entry in the same cycle); then 1100 rows of the other sets (more
    than the 1024-line forwarding ring; way 7's and victim 4's rows again before every 10th of
    the first 50), then the 24 rows again in a random order. Tables equal the model: an entry
    freed early lets a repeat read its row before the pending writes, one never freed forwards
    a line overwritten since. Written for the 314cb09 draw's mutants 16 (``row_cam.py:129``, victim
    4's count after a join and an acknowledgement in one cycle, bit 2 of ``count +
    lines`` inverted) and 20 (``rows.py:183``, bit 8 of way 7's acknowledged count written
    as 0: the count wraps at 256 and the entry never frees). Mutant 16 is off by 4 after one
    such cycle and back after the next, so whether it shows depends on how many there were:
    of the run lengths 500..503 at latencies 100 and 300, 500 passed it at both; each of
    the three kept kills it on its own (seeds 1-3)."""
    tb = DeviceTB(dut, latency=300, name=f"tracker_joins_acked/run{run}")
    cfg = tb.cfg
    dim, ways, nv = 16, cfg.upd_ways, cfg.upd_victims
    mine, gap = await _one_tracker_set_and_others(tb, dim, 1100)
    w_rows, v_rows = mine[:ways], mine[ways:]
    again = (w_rows[7], v_rows[4])
    # the two rows again among the first 50 rows of the gap (a row freed early is read while
    # its writes are pending), then not for 1050 lines (a row never freed is forwarded an
    # overwritten line when it comes again)
    gap_again = [r for k, g_row in enumerate(gap)
                 for r in (list(again) * (k < 50 and k % 10 == 0) + [g_row])]
    order = (w_rows + [w_rows[7]] * 300 + w_rows + [v for v in v_rows for _ in range(2)]
             + [v_rows[4]] * run + gap_again + [mine[i] for i in tb.rng.permutation(ways + nv)])
    await _nolog_update(tb, order, 8, dim, "tracker joins while acknowledged")


@cocotb.test()
@cocotb.parametrize(extra=[0, 1])
async def device_update_stalls_past_2_to_the_18(dut, extra):
    """One NOLOG UPDATE, dim 16, of 25 rows of one row tracker set (``row_set``): they take its
    8 ways and 16 victims, the 25th waits until the first row's write is acknowledged. The
    PMEM's write latency is 2^18 + 4000 + ``extra`` cycles for the writes of the first 3000
    cycles of the UPDATE (set on the PMEM model after the recovery; descriptors by backdoor),
    8 after (B responses stay in order), reads 8. PERF_UPD_STALLS (cycles an item waited in
    the hazard check) is at least 2^18 (the case is reached) and at most the cycles the
    testbench counted for the doorbell; the table equals the model. Written for mutant 29 of
    the 314cb09 draw (``hw/update/row_reader.py:144``: bit 24 of the stall count inverted in
    ``stalls + 1`` while its bit 18 is set, so the count alternates between true and 2^24
    more; ``extra`` 0 and 1 end it on both phases)."""
    from hw.update.rows import row_set
    w_lat = (1 << 18) + 4000 + extra
    tb = DeviceTB(dut, latency=8, via_host=False, name=f"stalls_2_18/+{extra}")
    cfg, rng = tb.cfg, tb.rng
    dim, set_bits = 16, (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    n_rows, n = 1 << 16, cfg.upd_ways + cfg.upd_victims + 1
    s = int(rng.integers(0, 1 << set_bits))
    rows = [(int(h) << set_bits) | (s ^ row_set(int(h) << set_bits, set_bits))
            for h in rng.choice(n_rows >> set_bits, n, replace=False)]
    await _sparse_table(tb, n_rows, dim, rows, lr=0.1)

    async def slow_writes_at_first():
        tb.pmem.write_latency = w_lat
        await ClockCycles(dut.clk, 3000)
        tb.pmem.write_latency = 8
    t0 = tb.drv.pmem.cycle
    cocotb.start_soon(slow_writes_at_first())
    await _nolog_update(tb, rows, 1, dim, "25 rows of one tracker set")
    took = tb.drv.pmem.cycle - t0
    stalls = await tb.drv.read("PERF_UPD_STALLS")
    assert (1 << 18) <= stalls <= took, tb.where(
        f"PERF_UPD_STALLS {stalls}, {took} cycles from writing the UPDATE to its check")
    dut._log.info(f"PERF_UPD_STALLS {stalls} in {took} cycles")


@cocotb.test()
@cocotb.parametrize(before=[4, 6])
async def device_update_grad_reads_ahead_of_a_blocked_row_stage(dut, before):
    """One NOLOG UPDATE at PMEM read latency 20, write latency 600, dim 128 (8 gradient lines a
    bag), 64 bags of one row each: ``before`` rows of other row tracker sets, then 60 rows of
    one set, so the row stage blocks on the 25th (the set's ways and all victims hold rows
    whose writes are not acknowledged) while the gradient stage reads ahead for the bags
    queued behind it until the 128-line delta ring is full. Tables equal the model. Written
    for mutant 65 of ``hw/update/grads.py:60`` (bit 5 of the ring lines taken, ``alloc``,
    read inverted; the register reloads its own output, so the count seen alternates between
    true and 32 off): with ``before`` 4 or 6 the ring fills when bit 5 of the count is set,
    the stage reads up to 31 lines past a full ring and overwrites deltas the blocked bags
    still need (with 24 rows before the block, bit 5 is clear there and the mutant only
    waits)."""
    from hw.update.rows import row_set
    tb = DeviceTB(dut, latency=20, write_latency=600, name=f"ring_ahead/before{before}")
    cfg, rng = tb.cfg, tb.rng
    dim, set_bits = 128, (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    n_rows, nb = 1 << 16, 64
    s = int(rng.integers(0, 1 << set_bits))
    his = [int(h) for h in rng.choice(n_rows >> set_bits, nb, replace=False)]
    rows = [(h << set_bits) | ((s if k >= before else s ^ (1 + k)) ^ row_set(h << set_bits,
                                                                           set_bits))
            for k, h in enumerate(his)]
    assert sum(row_set(r, set_bits) == s for r in rows) == nb - before, rows
    await _sparse_table(tb, n_rows, dim, rows, lr=0.1)
    await _nolog_update(tb, rows, nb, dim, "gradient reads ahead")


@cocotb.test()
async def device_update_one_row_in_320_bags(dut):
    """One NOLOG UPDATE at PMEM latency 200, dim 16: 320 bags of one item, all the same row
    (the first reads it, every later one joins it while in flight and is forwarded the
    previous result), so the write stage waits for each bag's delta line, with the ring full,
    past the 256th line. The table equals the model. Written for mutant 66 of
    ``hw/update/delta.py:106`` (bit 7 of the delta lines written, ``filled``, forced 1: while
    the lines written modulo 256 are below 128 the write stage sees 128 more, takes a bag's
    line as written before it is and uses the ring's stale line)."""
    tb = DeviceTB(dut, latency=200, name="one_row_320_bags")
    rng = tb.rng
    dim, nb, n_rows = 16, 320, 1 << 16
    r = int(rng.integers(0, n_rows))
    await _sparse_table(tb, n_rows, dim, [r], lr=0.1)
    await _nolog_update(tb, [r] * nb, nb, dim, f"row {r} in {nb} bags")


async def _logged_batch_rolled_back(tb, *, n, dim, nb, what, reset=True,
                                    write_latency=None):
    """An open batch of ``n`` undo records (``n`` distinct rows of table 0 with ``2 n`` rows
    of ``dim``, in ``nb`` bags: LOOKUP+LOG, then an UPDATE of the same rows), aborted by a
    RECOVER after a power cycle (``reset``) or by RECOVER alone after a first scan of an empty
    log; ``write_latency``: the PMEM's write latency for the recovery (set on the Python PMEM
    model). Recovery rolls every row back: tables, log and RECOVERED_RECORDS equal the model."""
    await tb.power_on()
    await tb.recover()
    if not reset:
        await tb.recover()          # the superblock is valid now: this one scans (slot 0)
    await setup_tables(tb, [(0, 2 * n, dim, 0.0)])
    await tb.set_lr(lr_q(tb, 0.25))
    await tb.configure_ring(RING)
    idx = tb.rng.permutation(2 * n)[:n].astype(np.uint32)
    o = np.linspace(0, n, nb + 1).astype(np.uint32)
    oa, ia = tb.stage_u32(o), tb.stage_u32(idx)
    g = tb.stage_i32(tb.rng.integers(-2**26, 2**26, (nb, dim)))
    before = tb.table_bytes(0)
    await tb.run([lookup(0, nb, oa, ia, tb.out_area(nb * dim * 4), batch=1, tag=1),
                  update(0, nb, oa, ia, g, batch=1, tag=2)], f"{n} rows logged and updated")
    assert tb.table_bytes(0) != before, tb.where("the UPDATE changed nothing")
    specs = [(t, r, d) for t, (_, r, d) in tb.tables.items()]   # power_on forgets them
    if write_latency is not None:
        tb.pmem.write_latency = write_latency
    if reset:
        await tb.power_on()
    await tb.recover()
    assert tb.model.recovered_records == n, tb.where(f"model recovered "
                                                     f"{tb.model.recovered_records}")
    await tb.check(f"after recovery ({what})")
    assert tb.table_bytes_at(specs, 0) == before, tb.where("rows not rolled back")


@cocotb.test()
async def device_recovery_beyond_the_scan_window(dut):
    """An open batch whose undo log holds more records than the recovery scan's window
    (``log_window`` + 64, one per distinct row: LOOKUP+LOG, then an UPDATE of the same rows),
    cut by a power cycle: recovery finds the log's end past the window and rolls every row
    back; tables, log and RECOVERED_RECORDS equal the model."""
    tb = DeviceTB(dut, latency=8, name="scan_window")
    n = tb.cfg.log_window + 64
    await _logged_batch_rolled_back(tb, n=n, dim=16, nb=33, what="a log longer than the window")


@cocotb.test()
async def device_recovery_without_reset_beyond_the_scan_window(dut):
    """The case above aborted by RECOVER alone (no power cycle; the device was ready), after a
    RECOVER that scanned an empty log: the scan starts again from slot 0 (it does not keep
    the previous recovery's end), finds the end past the window and rolls every row back;
    tables, log and RECOVERED_RECORDS equal the model. Written for mutant 70
    (``hw/persist/engine.py:294``: the superblock version compared with bit 21 inverted, in
    the copy of that compare that starts the scan: a valid superblock then does not restart
    the scanner)."""
    tb = DeviceTB(dut, latency=8, name="scan_window_no_reset")
    n = tb.cfg.log_window + 64
    await _logged_batch_rolled_back(tb, n=n, dim=16, nb=33, reset=False,
                                    what="a log longer than the window, no reset")


@cocotb.test()
@cocotb.parametrize(dim=[32, 64])
async def device_recovery_with_slow_writes(dut, dim):
    """An open batch of 96 undo records of dim ``dim`` (two or four data lines each:
    LOOKUP+LOG, then an UPDATE of the same rows) cut by a power cycle, recovered at PMEM read
    latency 30 and write latency 300: the rollback writes (64 in flight) are slower than the
    record reads, so the record applier's line buffer fills and its data reads wait for room
    (a record's lines are reserved before they are read). Every row is rolled back; tables,
    log and RECOVERED_RECORDS equal the model. Written for the mutants of the buffer's free
    count in ``hw/persist/apply.py``: 48 (bit 3 of the lines given back forced 1) and 91 (bit
    1 of the count inverted when bit 4 is set). (The write latency is set on the Python PMEM
    model, the bench's default.)"""
    tb = DeviceTB(dut, latency=30, name=f"recovery_slow_writes/dim{dim}")
    await _logged_batch_rolled_back(tb, n=96, dim=dim, nb=8, write_latency=300,
                                    what="slow writes")


@cocotb.test()
async def device_abort_twice_with_set_overflow(dut):
    """``log_set_ways`` + 2 rows of table 0 share logged-set set 0 (``set0_rows``): the last two
    are re-logged every time they are met (later records hold mid-batch values). Batch 2 is
    attempted, aborted by reset + RECOVER (tables back to batch 1, the oldest record of a row
    wins), attempted again with fewer rows and aborted again (records of the first attempt
    carry the old recovery epoch and must be ignored), then committed. Everything equals the
    model, including RECOVERED_RECORDS and PERF_SET_OVERFLOW."""
    tb = DeviceTB(dut, latency=20, stall=0.05, name="abort_twice")
    await tb.power_on()
    await tb.recover()
    hot = set0_rows(tb.cfg, tb.cfg.log_set_ways + 2)
    specs = [(0, hot[-1] + 100, 16, 0.0), (1, 64, 64, 0.0)]
    await setup_tables(tb, specs)
    lr = lr_q(tb, 0.25)
    await tb.set_lr(lr)
    await tb.configure_ring(RING)
    descs, tag = batch_descs(tb, 1, 1)
    await tb.run(descs, "batch 1")
    committed = {t: tb.table_bytes(t) for t in (0, 1)}

    def attempt(rows_lists):
        out = []
        for k, rows in enumerate(rows_lists):
            o = tb.stage_u32([0, len(rows) // 2, len(rows)])
            i = tb.stage_u32(rows)
            g = tb.stage_i32(tb.rng.integers(-2**28, 2**28, (2, 16)))
            if k == 0:
                out.append(lookup(0, 2, o, i, tb.out_area(2 * 64), batch=2, tag=50 + k))
            out.append(update(0, 2, o, i, g, batch=2, tag=60 + k))
        return out

    async def abort(what):
        await tb.power_on()
        await tb.recover()
        await tb.check(what)
        assert tb.model.recovered_records > 0, tb.where(f"{what}: nothing to roll back")
        for t in (0, 1):
            assert tb.table_bytes_at(specs, t) == committed[t], tb.where(f"{what}: table {t} "
                                                                         "not rolled back")
        for tid, rows, dim, _ in specs:
            await tb.set_table(tid, tb.bases[tid], rows, dim)
        await tb.set_lr(lr)
        await tb.configure_ring(RING)

    await tb.run(attempt([hot + hot, [hot[-1], hot[-2], 3, hot[-1]], hot[::-1] * 2]),
                 "attempt 1")
    await tb.check("attempt 1")
    assert tb.table_bytes(0) != committed[0], tb.where("attempt 1 changed nothing")
    assert await tb.drv.read("PERF_SET_OVERFLOW") == tb.model.logged.overflows > 0, \
        tb.where(f"PERF_SET_OVERFLOW vs model {tb.model.logged.overflows}")
    await abort("abort 1")
    await tb.run(attempt([[hot[-2], hot[-1], hot[-2]], [0, hot[-1]]]), "attempt 2")
    await tb.check("attempt 2")
    await abort("abort 2")
    descs, _ = batch_descs(tb, 2, 100)
    await tb.run(descs, "batch 2")
    await tb.check("batch 2 committed")


# Regression: the update engine sends ``ensure`` ahead of its row stage; the undo logger must
# not read a re-logged row (its logged-set set is full) while the same UPDATE's previous write
# of that row is pending (it waits on the engine's ``q_busy``), or the record holds the row from
# before that write.
@cocotb.test()
@cocotb.parametrize(dim=[16, 128], latency=[1, 20])
async def device_relog_of_row_in_flight(dut, dim, latency):
    """Minimal case: ``log_set_ways`` rows (``set0_rows``) fill logged-set set 0 of table 0, so
    row R, the next row of set 0, is logged every time it is met. One UPDATE, one bag [those
    rows, R, R]: the second record of row R (slot ways + 1) must hold the row after its first
    update
    (docs/training.md sections 4-5: rows in descriptor order; a row not in the logged set is
    read, logged, then written)."""
    tb = DeviceTB(dut, latency=latency, name=f"relog/dim{dim}/lat{latency}")
    await tb.power_on()
    await tb.recover()
    ways = tb.cfg.log_set_ways
    rows = set0_rows(tb.cfg, ways + 1)
    rows.append(rows[-1])
    await setup_tables(tb, [(0, rows[-1] + 100, dim, 0.0)])
    await tb.set_lr(lr_q(tb, 0.5))
    await tb.configure_ring(RING)
    o = tb.stage_u32([0, len(rows)])
    i = tb.stage_u32(rows)
    g = tb.stage_i32(tb.rng.integers(-2**26, 2**26, (1, dim)))
    before = tb.table_bytes(0)
    try:    # everything but the record in slot 3 must match: a failure there is a real one
        await tb.run([update(0, 1, o, i, g, batch=1, tag=1)], f"UPDATE {rows}")
        assert tb.model.logged.overflows > 0, tb.where("set 0 did not overflow")
        slot3 = (tb.cfg.log_base + (ways + 1) * LOG_SLOT_BYTES, LOG_SLOT_BYTES)
        await tb.check("after the UPDATE, second record of row R left out", mask=[slot3])
        rtl_slot3 = tb.mem.read(*slot3)
        # the abort still rolls back to the batch start (the oldest record of row R wins)
        await tb.power_on()
        await tb.recover()
        await tb.check("after abort, second record of row R left out", mask=[slot3])
        assert tb.mem.read(tb.bases[0], len(before)) == before, "rollback wrong"
    except AssertionError as e:
        raise RuntimeError(f"unexpected mismatch: {e}") from None
    assert rtl_slot3 == tb.model.mem.read(*slot3), tb.where(
        f"second record of row {rows[-1]} differs from the model" + tb.explain(slot3[0]))


def _tracker_sets(cfg):
    """(set bits, row -> set) of the device's row tracker: ``upd_rows / upd_ways`` sets,
    ``hw.update.rows.row_set``."""
    from hw.update.rows import row_set
    set_bits = (cfg.upd_rows // cfg.upd_ways).bit_length() - 1
    return set_bits, lambda r: row_set(r, set_bits)


def _logged_set0_rows(cfg, n_rows):
    """Rows below ``n_rows`` of table 0 in logged-set set 0: ``r = hi << 2 lo | a << lo | a``
    (so ``(r ^ r >> lo) & (sets - 1)`` is 0) for every ``hi`` and ``a`` = 1 .. sets - 1."""
    lo = cfg.log_set_sets.bit_length() - 1
    return [hi << 2 * lo | a << lo | a for hi in range(n_rows >> 2 * lo)
            for a in range(1, cfg.log_set_sets)]


async def _lookup_log_then_update(tb, looked, rows, dim, what):
    """The relog tests' batch: a LOOKUP+LOG of ``looked``, then an UPDATE of ``rows`` (4 bags
    each, batch 1, random gradients of ``dim``); set 0 of the logged set has overflowed and
    the tables equal the model."""
    nb = 4
    lo = tb.stage_u32(np.linspace(0, len(looked), nb + 1).astype(np.uint32))
    o = tb.stage_u32(np.linspace(0, len(rows), nb + 1).astype(np.uint32))
    g = tb.stage_i32(tb.rng.integers(-2**26, 2**26, (nb, dim)))
    await tb.run([lookup(0, nb, lo, tb.stage_u32(looked), tb.out_area(nb * dim * 4), batch=1,
                         tag=1),
                  update(0, nb, o, tb.stage_u32(rows), g, batch=1, tag=2)], what)
    assert tb.model.logged.overflows > 0, tb.where("set 0 did not overflow")
    await tb.check(f"after the UPDATE ({what})")


@cocotb.test()
@cocotb.parametrize(way=[2, 3])
async def device_relog_of_row_in_flight_in_a_later_way(dut, way):
    """The relog case above with row R in way ``way`` of its row tracker set (``row_set``),
    at PMEM read latency 20 and write latency 300: a LOOKUP+LOG logs ``log_set_ways`` rows of
    logged-set set 0 (``way`` of them in R's tracker set, the rest elsewhere) and 400 rows of
    other sets (one per set); the UPDATE reads the 400 rows (their writes back up behind the
    engine's ``max_writes``), then the ``way`` rows, which still hold ways 0 .. ``way - 1``
    when R enters after its synchronous logging, then R twice. R has bit 7 clear and its
    tracker set bit 3 set. The second record of R must hold R after its first update: tables,
    log and completions equal the model. Written for the mutants of the undo logger's tracker
    query (``q2_hit``) in ``hw/update/rows.py``: 12 (way 3's row compare with bit 21 of the
    query inverted when bit 7 is clear) and 35 (way 2's query address with bit 1 inverted
    when bit 3 is set), which let the logger read R while its first write is pending."""
    tb = DeviceTB(dut, latency=20, write_latency=300, name=f"relog_way{way}")
    cfg = tb.cfg
    sets, lways = cfg.log_set_sets, cfg.log_set_ways
    _, tset = _tracker_sets(cfg)
    n_rows, dim, n_x = 1 << 20, 16, 400
    cands = [a * sets + a for a in range(1, sets)]      # logged-set set 0 of table 0
    rs = [r for r in cands if not r >> 7 & 1 and tset(r) >> 3 & 1
          and sum(tset(c) == tset(r) for c in cands) > way]
    R = int(tb.rng.choice(rs))
    held = [r for r in cands if tset(r) == tset(R) and r != R][:way]
    fill = held + [r for r in cands if tset(r) != tset(R)][:lways - way]
    # one row in each of n_x other logged sets (h = (row ^ row >> 10) & (sets - 1)), away
    # from R's tracker set
    lo_bits = sets.bit_length() - 1
    xs = []
    for h in tb.rng.permutation(np.arange(1, sets))[:n_x]:
        hi = int(tb.rng.integers(0, n_rows >> lo_bits))
        r = hi << lo_bits | (int(h) ^ (hi & (sets - 1)))
        xs.append(r if tset(r) != tset(R) else r ^ (1 << lo_bits + 1) ^ 2)
    hs = {(r ^ r >> lo_bits) & (sets - 1) for r in xs}
    assert len(hs) == n_x and 0 not in hs and tset(R) not in {tset(r) for r in xs}, xs
    await _sparse_table(tb, n_rows, dim, fill + xs + [R], lr=0.5)
    await _lookup_log_then_update(tb, fill + xs, xs + held * 2 + [R, R], dim,
                                  f"relog of row {R} in way {way}")


async def _relog_of_row_in_entry(tb, *, before, r_ok, what):
    """The relog case of ``device_relog_of_row_in_flight_in_a_later_way`` with ``before``
    rows of R's row tracker set in flight when R enters (``upd_ways`` + v puts R in victim
    v), R drawn among the rows of logged-set set 0 of a table of 2^21 rows with ``r_ok(R)``.
    A LOOKUP+LOG logs 8 other rows of set 0 (R then overflows it and is logged every time
    it is met), the ``before`` rows and 400 rows of other tracker sets (at most 4 a set, so
    they take no victim), each in a logged set of its own; the UPDATE reads the 400 rows,
    the ``before`` rows twice, then R twice. Tables, log and completions equal the model."""
    cfg, rng = tb.cfg, tb.rng
    sets, lways = cfg.log_set_sets, cfg.log_set_ways
    _, tset = _tracker_sets(cfg)
    lo = sets.bit_length() - 1
    n_rows, dim, n_x = 1 << 21, 16, 400

    def lset(r):                  # logged-set set of a row of table 0
        return (r ^ r >> lo) & (sets - 1)
    set0 = _logged_set0_rows(cfg, n_rows)
    R = int(rng.choice([r for r in set0 if r_ok(r)]))
    fill = [int(r) for r in rng.permutation([r for r in set0 if tset(r) != tset(R)])[:lways]]
    used, held, xs, per_set = {0}, [], [], collections.Counter()
    for r in (int(x) for x in rng.integers(0, n_rows, 200_000)):
        if len(held) < before and tset(r) == tset(R) and lset(r) not in used:
            held.append(r)
            used.add(lset(r))
        elif (len(xs) < n_x and tset(r) != tset(R) and lset(r) not in used
              and per_set[tset(r)] < 4):
            xs.append(r)
            used.add(lset(r))
            per_set[tset(r)] += 1
    assert len(held) == before and len(xs) == n_x, (len(held), len(xs))
    await _sparse_table(tb, n_rows, dim, fill + held + xs + [R], lr=0.5)
    await _lookup_log_then_update(tb, fill + held + xs, xs + held * 2 + [R, R], dim,
                                  f"relog of row {R} ({what})")


RELOG_ENTRIES = {   # place of R: (rows of its tracker set before it, condition on R)
    "way2_row_bit20": (2, lambda r: r >> 20 & 1),
    "victim11": (8 + 11, lambda r: True),
    "victim12_row_bit13": (8 + 12, lambda r: r >> 13 & 1),
}


@cocotb.test()
@cocotb.parametrize(place=sorted(RELOG_ENTRIES))
async def device_relog_of_row_in_flight_in_other_tracker_entries(dut, place):
    """The relog case with row R in way 2 of its row tracker set with bit 20 set, in victim
    11, and in victim 12 with bit 13 set (``_relog_of_row_in_entry``), at PMEM read latency
    20 and write latency 300: the second record of R must hold R after its first update.
    Written for the mutants of the undo logger's tracker query (``q2_hit``): 22
    (``hw/update/rows.py:173``, way 2's row compare with bit 20 of the query forced 0), 38
    (``hw/update/row_cam.py:105``, victim 11's compare with bit 25 of its row forced 1) and
    11 (same line, victim 12's compare with bit 25 of the query inverted when bit 13 is
    set), which let the logger read R while its first write is pending."""
    tb = DeviceTB(dut, latency=20, write_latency=300, name=f"relog_{place}")
    await tb.power_on()
    await tb.recover()
    before, r_ok = RELOG_ENTRIES[place]
    await _relog_of_row_in_entry(tb, before=before, r_ok=r_ok, what=place)


@cocotb.test()
async def device_relog_of_a_row_left_in_way_2_by_the_previous_update(dut):
    """Row R of 8 lines (dim 128) of logged-set set 0 and row tracker set 0 (``row_set``), PMEM
    latency 20, after a reset: a NOLOG UPDATE of two other rows of tracker set 0, R (ways 0,
    1 and 2 of set 0; R's entry then counts 8 lines issued and 8 acknowledged and keeps R's
    row number after the UPDATE) and 30 rows of other tracker sets: 264 line writes, so the
    engine's queue of written entries (256 slots) ends empty with its next slot holding the
    entry of the 9th write, one of set 0 (the queue's memory keeps what earlier tests wrote:
    the test writes the slot itself); then in the same batch a LOOKUP+LOG of 8 other rows of
    logged-set set 0 (R then overflows it and is logged every time it is met) and an UPDATE
    of R in 4 bags: the logger reads R for each record once no write of R is pending.
    Tables, log and completions equal the model. Written for mutant 57 of the 314cb09 draw
    (``hw/update/rows.py:226``: way 2's acknowledged count as the logger's query reads it,
    bit 5 inverted while bit 3 of way 2's count in the set of the next acknowledgement is
    set: R's idle entry looks busy for good and the second UPDATE never completes, checked:
    the driver's wait for its completion times out; the other relog tests use rows of one
    line, whose count never sets bit 3)."""
    tb = DeviceTB(dut, latency=20, name="relog_way2_left_over")
    cfg, rng = tb.cfg, tb.rng
    lways = cfg.log_set_ways
    set_bits, tset = _tracker_sets(cfg)
    n_rows, dim, n_x = 1 << 24, 128, 30
    set0 = _logged_set0_rows(cfg, n_rows)
    R = int(rng.choice([r for r in set0 if tset(r) == 0]))
    fill = [int(r) for r in rng.permutation([r for r in set0 if r != R])[:lways]]
    hs = rng.choice(n_rows >> set_bits, 2 + n_x, replace=False)
    pre = [int(h) << set_bits | tset(int(h) << set_bits) for h in hs[:2]]
    xs = [int(h) << set_bits | (1 + k) ^ tset(int(h) << set_bits) for k, h in enumerate(hs[2:])]
    assert {tset(r) for r in pre + [R]} == {0} and R not in pre, (pre, R)
    assert sorted(tset(r) for r in xs) == list(range(1, n_x + 1)), xs
    await _sparse_table(tb, n_rows, dim, fill + pre + xs + [R], lr=0.5)
    first = pre + [R] + xs
    assert len(first) * dim * 4 // 64 == 264
    nb = 3
    await tb.run([update(0, nb, tb.stage_u32(np.linspace(0, len(first), nb + 1).astype(np.uint32)),
                         tb.stage_u32(first), tb.stage_i32(rng.integers(-2**26, 2**26, (nb, dim))),
                         batch=1, tag=1, nolog=True)], "R in way 2 of tracker set 0")
    await _lookup_log_then_update(tb, fill, [R] * 4, dim, f"relog of row {R}")


@cocotb.test()
@cocotb.parametrize(latency=[1, 20])
async def device_logged_set_repeat_of_a_row_just_inserted(dut, latency):
    """One LOOKUP+LOG of dim 64 (four lines a row; table 0), then its COMMIT (a LOOKUP
    completes before its records are persistent): for each way w of the logged set, in sets
    of their own, w rows of the set, then a row R two or three times in a row. R misses, is
    logged and inserted into way w; its repeat is loaded into the lookup stage as R is
    decided and waits there while R's lines are taken, so it is decided from the bypass
    (``SetPatch``: the way's key written since the read and equal to the loaded one) and must
    hit: one record per row. Log, tables and completions equal the model. Written for
    mutant 88 of ``hw/undolog/logged_set.py:282`` (bit 6 of ``key_match`` forced 0 when no
    key is loaded: R in way 6 was logged again)."""
    tb = DeviceTB(dut, latency=latency, name=f"logged_set_repeat/lat{latency}")
    await tb.power_on()
    await tb.recover()
    cfg, rng = tb.cfg, tb.rng
    sets, ways = cfg.log_set_sets, cfg.log_set_ways
    lo = sets.bit_length() - 1
    n_rows, dim = 1 << 20, 64
    fresh = iter(int(s) for s in rng.permutation(np.arange(1, sets)))
    used = set()

    def row_in(s):                # a new row of table 0 in logged-set set s
        while True:
            hi = int(rng.integers(0, n_rows >> lo))
            r = hi << lo | (s ^ (hi & (sets - 1)))
            if r not in used:
                used.add(r)
                return r
    seq = []
    for w in range(ways):
        for times in (2, 3):
            s = next(fresh)
            ks = [row_in(s) for _ in range(w + 1)]
            seq += ks[:w] + [ks[w]] * times
    await _sparse_table(tb, n_rows, dim, sorted(used), lr=0.5)
    nb = 8
    o = tb.stage_u32(np.linspace(0, len(seq), nb + 1).astype(np.uint32))
    await tb.run([lookup(0, nb, o, tb.stage_u32(seq), tb.out_area(nb * dim * 4), batch=1, tag=1),
                  commit(1, tag=2)], "repeats of rows just inserted")
    await tb.check("after the LOOKUP+LOG and its COMMIT")


@cocotb.test()
async def device_logged_set_neighbouring_sets_stay_apart(dut):
    """Logged-set sets one index bit apart do not share ways: for three random sets s of a
    random table t != 0, ``log_set_ways`` rows fill s and one row goes into each set s ^ 2^b
    (b < log2(log_set_sets)); every set index from docs/training.md section 5 ((row ^ row >>
    S ^ table) mod sets, ``sw_model.training.log_set_index``), no set holds more than its
    ways. One LOOKUP+LOG, an UPDATE of the same bags and the COMMIT: no overflow
    (PERF_SET_OVERFLOW 0, as the model), one record per row, log, tables and completions equal
    the model. A set index with a bit stuck puts s and a neighbour in one set of ``ways`` + 1
    rows: one overflow, and that row is logged again by the UPDATE. Written for mutant 60 of
    ``hw/undolog/logged_set.py:118`` (bit 1 of the set index forced 0)."""
    from sw_model.training import log_set_index
    tb = DeviceTB(dut, latency=16, name="logged_set_neighbours")
    await tb.power_on()
    await tb.recover()
    cfg, rng = tb.cfg, tb.rng
    sets, ways = cfg.log_set_sets, cfg.log_set_ways
    lo = sets.bit_length() - 1
    tid = int(rng.integers(1, N_TABLES))
    n_rows, dim = 1 << 20, 16
    used = set()

    def row_in(s):                # a new row of table tid in logged-set set s
        while True:
            hi = int(rng.integers(0, n_rows >> lo))
            r = hi << lo | ((s ^ hi ^ tid) & (sets - 1))
            if r not in used:
                assert log_set_index(sets, tid, r) == s, (r, s)
                used.add(r)
                return r
    while True:
        full = [int(s) for s in rng.choice(sets, 3, replace=False)]
        per_set = collections.Counter(s ^ (1 << b) for s in full for b in range(lo))
        if not set(full) & set(per_set) and max(per_set.values()) < ways:
            break
    seq = [row_in(s) for s in full for _ in range(ways)]
    seq += [row_in(s) for s, n in per_set.items() for _ in range(n)]
    rng.shuffle(seq)
    base = tb.talloc.alloc(n_rows * dim * 4)
    await tb.set_table(tid, base, n_rows, dim)
    for r in sorted(used):
        tb.poke(base + r * dim * 4, rng.integers(-2**26, 2**26, dim).astype("<i4").tobytes())
    await tb.set_lr(lr_q(tb, 0.5))
    await tb.configure_ring(RING)
    nb = 6
    o = tb.stage_u32(np.linspace(0, len(seq), nb + 1).astype(np.uint32))
    i = tb.stage_u32(seq)
    g = tb.stage_i32(rng.integers(-2**28, 2**28, (nb, dim)))
    await tb.run([lookup(tid, nb, o, i, tb.out_area(nb * dim * 4), batch=1, tag=1),
                  update(tid, nb, o, i, g, batch=1, tag=2), commit(1, tag=3)],
                 f"sets {full} full, one row in each neighbour (table {tid})")
    await tb.check("after the batch")
    assert tb.model.logged.overflows == 0, tb.where("the model overflowed a set")
    got = await tb.drv.read("PERF_SET_OVERFLOW")
    assert got == 0, tb.where(f"PERF_SET_OVERFLOW {got}, the model 0 (sets {full})")


@cocotb.test()
async def device_recovery_epoch_with_bit_63_set(dut):
    """The superblock's ``recovery_epoch`` set by backdoor to a random value with bit 63 set,
    then to 2^64 - 1, each followed by a power cycle and RECOVER: recovery writes E+1 (modulo
    2^64, so 0 the second time; docs of ``hw/persist/engine.py``); memory and COMMITTED equal
    the model. ``device_full_range_fields`` keeps the epoch below 2^63. Written for mutant 84
    of ``hw/persist/engine.py:353`` (bit 17 of E inverted when bit 63 is set, in the copy of
    E+1 that is written)."""
    tb = DeviceTB(dut, latency=16, name="epoch_bit63")
    cfg, rng = tb.cfg, tb.rng
    off = next(o for n, o, _ in SB_FIELDS if n == "recovery_epoch")
    await tb.power_on()
    await tb.recover()
    for e in (int(rng.integers(1 << 63, 1 << 64, dtype=np.uint64)), (1 << 64) - 1):
        tb.poke(cfg.superblock_base + off, e.to_bytes(8, "little"))
        await tb.power_on()
        await tb.recover()
        await tb.check(f"after recovery from epoch {e:#x}")
        assert tb.model.recovery_epoch == (e + 1) % (1 << 64), tb.where(
            f"model epoch {tb.model.recovery_epoch:#x}")


class _CopyStarted(Exception):
    """The golden model reached a SNAPSHOT's first payload write (its write hook)."""


def _model_starts_snapshot(tb, desc):
    """Run SNAPSHOT ``desc`` on a copy of the golden model, stopped by its write hook at the
    first payload write: None when the model accepts it (every check of docs/training.md
    section 9 passed, ``A`` taken, copy started), else the completion it refuses it with. The
    model copies atomically: a 256 MiB copy would take it seconds and gigabytes. ``tb.model``
    is left as it was."""
    m = copy.copy(tb.model)
    m.mem = tb.model.mem.copy()
    m.irq_status = set(m.irq_status)

    def stop(addr, data, what):
        if what == "snap_data":
            raise _CopyStarted(addr)
    m.on_write = stop
    try:
        return m.parse_cpl(m.execute(desc))
    except _CopyStarted:
        return None


@cocotb.test()
async def device_snapshot_lengths_at_the_slot_capacity(dut):
    """SNAPSHOTs of lengths at the slot capacity (docs/training.md section 9: ``slot_bytes - 64``,
    256 MiB - 64 by default, from an unaligned source in staging): capacity + 1 and + 64 are
    refused with SNAP_LENGTH (value = the length; completions, memory and error CSRs equal the
    model's), while one length drawn from the 512 below the capacity with bit 9 clear, and the
    capacity itself, are accepted (the model, stopped at its first payload write, accepts them
    too). An accepted copy is not simulated to its end (4.2 M lines): its completion must be
    the contract's (OK, ``lines`` = ceil(length / 64), the rest 0) at once, with no error,
    STATUS.SNAP_BUSY = 1 and MLP_* still the previous snapshot's; once the staged first 256
    source lines have been copied every payload line written equals its source line; then
    power fails mid-copy, and after recovery (the model given the checked payload lines and
    completion record) memory and CSRs equal the model: the previous snapshot (slot A) is
    recovered, nothing else was written. Written for mutant 18 of ``hw/cmdproc/decoder.py:118``
    (bit 9 of the length forced 1 in ``length > capacity``: lengths in the 512 below the
    capacity with bit 9 clear refused)."""
    tb = DeviceTB(dut, latency=8, name="snapshot_at_capacity")
    cfg, rng, drv = tb.cfg, tb.rng, tb.drv
    slot_bytes = (cfg.slots_size // 2) // 64 * 64                  # the contract's formula
    cap = slot_bytes - 64
    assert snap_capacity(cfg) == cap, (snap_capacity(cfg), cap)
    window = [n for n in range(cap - 511, cap + 1) if not n & 1 << 9]
    assert window, f"capacity {cap:#x}: no length below it with bit 9 clear"
    await tb.power_on()
    await tb.recover()
    await tb.configure_ring(RING)
    # snapshot 1 in slot A and batch 1 committed: A = P = C = 1, so epoch 2 goes to slot B
    s1 = tb.stage(rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
    await tb.run([DeviceDriver.snapshot_desc(1, s1, 300, 1), commit(1, 2)], "snapshot 1")
    await drv.wait_snapshot_idle()
    await tb.check("after snapshot 1")
    base = tb.salloc.alloc(cap + 128)
    src = base + int(rng.integers(1, 64))                          # realigned copy
    prefix = 256 * 64                                              # staged; the rest reads 0
    tb.poke(src, rng.integers(0, 256, prefix, dtype=np.uint8).tobytes())
    s0, s_end = cfg.staging_base, cfg.staging_base + cfg.staging_size
    assert s0 <= src and src + cap + 64 <= s_end

    refused = [cap + 1, cap + 64]
    got = await tb.run([DeviceDriver.snapshot_desc(2, src, n, 10 + k)
                        for k, n in enumerate(refused)], "lengths over the capacity")
    for n, c in zip(refused, got, strict=True):
        assert (int(c["status"]), int(c["err_value"]), c["lines"]) == (E.SNAP_LENGTH, n, 0), \
            tb.where(f"length {n:#x} > capacity {cap:#x}: {E(int(c['status'])).name} "
                     f"{int(c['err_value']):#x}, contract SNAP_LENGTH {n:#x}")
    await tb.check("after the lengths over the capacity")

    pay = snap_slot_addr(cfg, 1) + 64                               # slot B's payload
    for k, n in enumerate([int(rng.choice(window)), cap]):
        what = f"SNAPSHOT(2) of {n:#x} bytes (capacity {cap:#x})"
        tag = int(rng.integers(0, 1 << 32))
        d = DeviceDriver.snapshot_desc(2, src, n, tag)
        refusal = _model_starts_snapshot(tb, d)
        assert refusal is None and n <= cap, tb.where(f"{what}: model refuses: {refusal}")
        m = tb.model
        want = dict(tag=tag, kind=int(K.SNAPSHOT), status=int(E.OK), err_bag=0, rows=0,
                    err_value=0, sat=0, lines=-(-n // 64), log_records=0, cycles=0, batch=2,
                    seq=(m.seq + 1) & 0xFFFFFFFF)
        cpl_addr = m.cpl_base + CPL_BYTES * m.tail
        await tb.ring_raw([d])
        await drv.wait_head(drv.tail, timeout=20_000)   # the completion comes before the copy
        (c,) = await drv.completions([(drv.tail - 1) % drv.ring_size])
        bad = {f: (want[f], int(c[f])) for f, _, _ in CPL_FIELDS
               if f != "cycles" and want[f] != int(c[f])}
        assert not bad, tb.where(f"{what}: accepted by the contract and the model, RTL "
                                 f"completion differs (contract, RTL): {bad}")
        errs = (await drv.read("ERR_COUNT"),
                bool(await drv.read("STATUS") & drv.STATUS_ERROR))
        assert errs == (m.err_count, m.status_error), tb.where(f"{what}: error CSRs {errs}")
        st = await drv.mlp_state()
        assert (st["busy"], st["slot"], st["epoch"]) == (1, 1, 1), tb.where(
            f"{what}: STATUS/MLP_* {st} while the copy runs")
        for _ in range(2000):
            if tb.mem.read(pay + prefix - 64, 64) == tb.mem.read(src + prefix - 64, 64):
                break
            await ClockCycles(dut.clk, 8)
        assert await drv.read("STATUS") & drv.STATUS_SNAP_BUSY, tb.where(f"{what}: not busy")
        written = [a for a in tb.mem.lines() if pay <= a < pay + n]
        assert set(range(pay, pay + prefix, 64)) <= set(written), tb.where(
            f"{what}: the first {prefix // 64} payload lines not written "
            f"({len(written)} lines written)")
        for a in written:
            assert tb.mem.read(a, 64) == tb.mem.read(src + a - pay, 64), tb.where(
                f"{what}: payload line {(a - pay) // 64} differs from its source")
        dut._log.info(f"{what}: accepted, {len(written)} payload lines written, power cut")
        await tb.power_on()
        for a in written:                     # the lines the copy may write, checked above
            m.mem.write(a, tb.mem.read(a, 64))
        m.mem.write(cpl_addr, pack_fields(CPL_FIELDS, want, CPL_BYTES))
        await tb.recover()
        await tb.check(f"after {what} cut by a power failure")
        st = await drv.mlp_state()
        assert (st["slot"], st["epoch"]) == (1, 1), tb.where(f"{what}: recovered {st}")
        await tb.configure_ring(RING)


# ---------------------------------------------------------------------------- 2. bad input
@cocotb.test()
async def device_not_ready_and_csr_misuse(dut):
    """Doorbell before recovery: NOT_READY (tail not taken). Writes to read-only registers
    (CSR_RO) and accesses to unmapped offsets (CSR_ADDR): SLVERR, ERR_CODE/ERR_VALUE = the
    address, ERR_COUNT, STATUS.ERROR sticky until ERR_CLEAR, IRQ_STATUS.ERR. The device works
    afterwards."""
    tb = DeviceTB(dut, latency=8, name="not_ready_csr")
    await tb.power_on()
    await setup_tables(tb, [(0, 32, 16, 0.0)])
    await tb.configure_ring(8)
    await tb.check("fresh")
    await tb.doorbell_err(1, E.NOT_READY, 1, "doorbell before recovery")
    await tb.check("NOT_READY")
    mp = tb.map
    for name in ("ID", "STATUS", "ERR_CODE", "COMMITTED_LO", "CMD_HEAD", "CPL_HEAD",
                 "CAP_LOG_SLOTS", "PERF_DESC_DONE", "REGION_STAGING_BASE_HI"):
        await tb.csr_bad_write(mp.offset(name), E.CSR_RO)
        await tb.check(f"write to read-only {name}")
    for addr in (0x008, 0x00C, 0x02C, 0x280, 0x7F0, 0xFFC):
        await tb.csr_bad_write(addr, E.CSR_ADDR)
        await tb.check(f"write to unmapped {addr:#x}")
    for addr in (0x008, 0x3A0):
        await tb.csr_bad_read(addr)
        await tb.check(f"read of unmapped {addr:#x}")
    await tb.err_clear()
    await tb.irq_clear("ERR")
    await tb.check("after ERR_CLEAR and IRQ_STATUS.ERR cleared")
    await tb.recover()
    # the ring configured before recovery is still valid: run a LOOKUP through it
    _, rows, dim = tb.tables[0]
    o, i = bags(tb, 3, 4, rows)
    await tb.run([lookup(0, 3, tb.stage_u32(o), tb.stage_u32(i), tb.out_area(3 * dim * 4),
                         batch=1, tag=5)], "first LOOKUP after recovery")
    await tb.check("after recovery and a LOOKUP")


@cocotb.test()
async def device_csr_map_sweep(dut):
    """Every register of the map through the device's own CSR block: each reads with OKAY,
    constants, capabilities and the memory map read as ``DeviceConfig`` and docs/registers.md
    say, STATUS is READY after recovery; every plain read/write register (table directory,
    LR, MLP_LAG, IRQ_ENABLE) and the ring's bases and size hold all ones, all zeros and a
    random value (each read back) and return to their reset values after a power cycle; a write to each read-only register is
    refused (CSR_RO, the model's error registers after each)."""
    tb = DeviceTB(dut, latency=8, name="csr_sweep")
    cfg, mp = tb.cfg, tb.map
    await tb.power_on()
    await tb.recover()
    want = {"ID": 0x5443_5843, "VERSION": 0x0001_0000, "CAP_TABLES": 8,
            "CAP_FRAC_BITS": cfg.frac_bits,
            "CAP_LOG_SET_ROWS": cfg.log_set_sets * cfg.log_set_ways,
            "CAP_LOG_WINDOW": cfg.log_window, "CAP_LOG_SLOTS": cfg.log_slots,
            "STATUS": mp.pack("STATUS", READY=1), "ERR_CODE": 0, "ERR_COUNT": 0}
    for r in REGIONS:
        for what in ("base", "size"):
            v = getattr(cfg, f"{r}_{what}")
            want[f"REGION_{r.upper()}_{what.upper()}_LO"] = v & 0xFFFF_FFFF
            want[f"REGION_{r.upper()}_{what.upper()}_HI"] = v >> 32
    for name in mp.registers:
        got = await tb.drv.read(name)
        if name in want:
            assert got == want[name], tb.where(f"{name}: read {got:#x}, expected {want[name]:#x}")
    plain = [r for r in mp.registers.values() if all(
        f["access"] == "rw" and not f["singlepulse"] and not f["onwrite"] and not f["swmod"]
        for f in r["fields"])]
    assert len(plain) >= 32 + 3, [r["name"] for r in plain]
    # the ring registers store what is written while idle (checked only at the doorbell:
    # docs/training.md section 3); CMD_TAIL is the doorbell itself
    ring = [mp.registers[n] for n in ("CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO",
                                      "CPL_BASE_HI")]
    plain += ring
    masks = {r["name"]: sum(((1 << f["width"]) - 1) << f["lsb"] for f in r["fields"])
             for r in plain}
    for pattern in ("ones", "zeros", "random"):      # every bit both ways, then a random value
        stored = {n: {"ones": m, "zeros": 0}.get(pattern, int(tb.rng.integers(0, 1 << 32)) & m)
                  for n, m in masks.items()}
        for name, v in stored.items():
            await tb.drv.write(name, v)
        for name, v in stored.items():
            got = await tb.drv.read(name)
            assert got == v, tb.where(f"{name}: read {got:#x} after writing {v:#x} ({pattern})")
    for r in mp.registers.values():
        if all(f["access"] == "r" for f in r["fields"]):
            await tb.csr_bad_write(r["offset"], E.CSR_RO, value=int(tb.rng.integers(0, 1 << 32)))
    await tb.power_on()
    for r in plain:
        reset = sum((f["reset"] or 0) << f["lsb"] for f in r["fields"])
        got = await tb.drv.read(r["name"])
        assert got == reset, tb.where(f"{r['name']}: {got:#x} after reset, map says {reset:#x}")
    await tb.recover()
    await tb.check("after the sweep, a power cycle and recovery")


@cocotb.test()
async def device_ring_errors(dut):
    """RING_CONFIG (size not a power of two / too big / zero, bases unaligned, outside staging,
    beyond addr_bits, completion ring past the staging end) at the doorbell; DOORBELL_RANGE;
    while 7 slow descriptors execute: RING_OVERFLOW, ring register writes refused with CSR_BUSY
    (register keeps its value), RECOVER refused with CSR_BUSY; everything pending still
    completes and equals the model."""
    tb = DeviceTB(dut, latency=100, name="ring_errors")
    cfg = tb.cfg
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, [(2, 256, 128, 0.0)])
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    good = tb.salloc.alloc(64 * 64)
    cases = [
        ("size 3", good, 3, good + 64 * 32, 3),
        ("size 0", good, 0, good + 64 * 32, 0),
        ("size 2^17", good, 1 << 17, good + 64 * 32, 1 << 17),
        ("size 1", good, 1, good + 64 * 32, 1),
        ("cmd base unaligned", good + 32, 8, good + 64 * 32, good + 32),
        ("cmd base in the table region", cfg.table_base, 8, good, cfg.table_base),
        ("cmd base beyond addr_bits", (1 << cfg.addr_bits) + s0, 8, good,
         (1 << cfg.addr_bits) + s0),
        ("cpl base unaligned", good, 8, good + 64 * 16 + 4, good + 64 * 16 + 4),
        ("cpl ring past the staging end", good, 8, s1 - 64 * 4, s1 - 64 * 4),
        ("cpl base 2^63", good, 8, 1 << 63, 1 << 63),
    ]
    for name, cb_, size, cpl, value in cases:
        await tb.configure_ring(size, cmd_base=cb_, cpl_base=cpl)
        await tb.doorbell_err(1, E.RING_CONFIG, value, name)
        await tb.check(f"RING_CONFIG: {name}")
    await tb.configure_ring(8)
    for v in (8, 9, 0xFFFF_FFFF):
        await tb.doorbell_err(v, E.DOORBELL_RANGE, v, f"doorbell {v}")
        await tb.check(f"DOORBELL_RANGE {v}")
    # 7 slow LOOKUPs (16 bags x 8 rows x 8 lines each at latency 100)
    _, rows, dim = tb.tables[2]
    descs = []
    for k in range(7):
        o = np.arange(0, 129, 8, dtype=np.uint32)
        i = tb.rng.integers(0, rows, 128).astype(np.uint32)
        descs.append(lookup(2, 16, tb.stage_u32(o), tb.stage_u32(i),
                            tb.out_area(16 * dim * 4), batch=1, tag=100 + k))
    await tb.ring_raw(descs)
    drv, mp = tb.drv, tb.map
    await tb.doorbell_err(6, E.RING_OVERFLOW, 6, "overflow while 7 pending")
    await tb.doorbell_err(0, E.RING_OVERFLOW, 0, "overflow while 7 pending")
    for name, v in (("CMD_SIZE", 16), ("CMD_BASE_LO", 0), ("CPL_BASE_HI", 1)):
        await drv.write(name, v)
        tb.model._error(E.CSR_BUSY, mp.offset(name))
    await drv.write("CONTROL", 1)
    assert tb.model.recover() == -1
    head = await drv.read("CMD_HEAD")
    busy = await drv.read("STATUS") & 1
    assert head < 7 and busy, tb.where(f"device no longer busy (head {head}): the test did not "
                                       "hit the busy window")
    assert await drv.read("CMD_SIZE") == 8
    assert await drv.read64("CMD_BASE") == tb.model.cmd_base
    assert await drv.read64("CPL_BASE") == tb.model.cpl_base
    await tb.finish("the 7 LOOKUPs")
    await tb.check("after overflow / CSR_BUSY / RECOVER while busy")
    # the ring keeps working: wrap around it
    o, i = bags(tb, 2, 3, rows)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    for k in range(3):
        await tb.run([lookup(2, 2, oa, ia, tb.out_area(2 * dim * 4), batch=1, tag=200 + k)
                      for _ in range(3)], "after the errors")
    await tb.check("after wrapping the ring")


@cocotb.test()
async def device_ring_config_error_value_is_the_size_written(dut):
    """RING_CONFIG for a CMD_SIZE with bit 26 set (2^26, 2^26 + 4: beyond 65536), the doorbell
    rung 0 to 3 cycles after the write: ERR_VALUE is the size written every time, as the
    model says. Written for mutant 59 (``hw/cmdproc/ring.py:105``: bit 0 of the ring's size
    register inverted on its output when bit 26 is set; the register reloads its own output
    while idle, so the size seen alternates every cycle)."""
    tb = DeviceTB(dut, latency=8, name="ring_size_bit26")
    await tb.power_on()
    await tb.recover()
    good = tb.salloc.alloc(64 * 64)
    for size in (1 << 26, (1 << 26) + 4):
        for wait in range(4):
            await tb.configure_ring(size, cmd_base=good, cpl_base=good + 64 * 32)
            if wait:
                await ClockCycles(dut.clk, wait)
            await tb.doorbell_err(1, E.RING_CONFIG, size, f"size {size:#x}, {wait} cycles")
            await tb.check(f"RING_CONFIG: size {size:#x}, doorbell {wait} cycles later")


@cocotb.test()
async def device_ring_of_8192_takes_4096_descriptors_in_one_doorbell(dut):
    """A command ring of 8192 slots and one doorbell of 4096 descriptors: the ring's free count
    (8191) has bit 12 set and the new descriptors are more than its low 12 bits, so only the
    whole 32-bit compare accepts them. 4095 descriptors of unknown kinds (the cheapest to
    execute: a completion each, UNKNOWN_KIND) with random tags, then a COMMIT of the open
    batch; every completion, the memory and the CSRs equal the model's. Written for mutant 45
    (``hw/cmdproc/ring.py``: ``n_new > free`` with bit 12 of ``free`` forced 0, which refuses
    this doorbell with RING_OVERFLOW)."""
    tb = DeviceTB(dut, latency=8, via_host=False, name="ring_8192")
    rng = tb.rng
    await tb.power_on()
    await tb.recover()
    await tb.configure_ring(8192)
    n = 4096
    descs = [tb.desc(kind=int(k), tag=int(t))
             for k, t in zip(rng.integers(5, 256, n - 1), rng.integers(0, 1 << 32, n - 1))]
    descs.append(commit(tb.model.committed + 1, tag=int(rng.integers(0, 1 << 32))))
    got = await tb.run(descs, "4096 descriptors in one doorbell")
    assert [c["status"] for c in got[:-1]] == [E.UNKNOWN_KIND] * (n - 1), tb.where("statuses")
    assert got[-1]["status"] == E.OK, tb.where("the COMMIT")
    await tb.check("after the 4096 descriptors")


@cocotb.test()
async def device_random_wide_fields_fail_the_range_checks(dut):
    """60 LOOKUP (with and without LOG) and UPDATE descriptors whose fields are drawn over
    their whole width: ``n_bags`` in [2^28, 2^32) (its offsets array, 4 (n_bags + 1) bytes,
    is larger than the staging region, so each fails a range check), the staging addresses
    anywhere in staging (aligned as required), 32-bit tags, LRs and, for a quarter of them,
    64-bit batch numbers; a few name an unconfigured table or unaligned offsets. Every
    completion (status, value, bag) equals the model's, nothing is written but the error
    registers, and the device runs a good LOOKUP after them."""
    tb = DeviceTB(dut, latency=8, name="wide_fields")
    cfg, rng = tb.cfg, tb.rng
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, [(0, 64, 16, 0.0)])
    await tb.set_lr(lr_q(tb, 0.1))
    await tb.configure_ring(RING)
    s0, n_lines = cfg.staging_base, cfg.staging_size >> 6

    def anywhere(align):
        return s0 + int(rng.integers(0, n_lines)) * 64 + int(rng.integers(0, 64 // align)) * align

    descs = []
    for k in range(60):
        n_bags = int(rng.integers(1 << 28, 1 << 32))
        batch = int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2)) if k % 4 == 3 else 1
        tag = int(rng.integers(0, 1 << 32))
        oaddr, iaddr = anywhere(4) + 2 * (k % 11 == 10), anywhere(4)
        table = int(rng.integers(1, 8)) if k % 7 == 6 else 0
        if k % 3 == 2:
            lr = int(rng.integers(0, 1 << 32)) if k % 2 else None
            descs.append(update(table, n_bags, oaddr, iaddr, anywhere(64), batch=batch,
                                tag=tag, lr=lr, nolog=bool(k % 5 == 0)))
        else:
            descs.append(lookup(table, n_bags, oaddr, iaddr, anywhere(64), log=bool(k % 3),
                                batch=batch, tag=tag))
    got = await tb.run_in_doorbells(descs, "wide fields")
    seen = collections.Counter(E(int(c["status"])).name for c in got)
    dut._log.info(f"wide fields: {dict(seen)}")
    assert "OK" not in seen and len(seen) >= 3, tb.where(f"statuses {dict(seen)}")
    await tb.check("after the wide-field descriptors")
    o, i = tb.stage_u32([0, 2, 3]), tb.stage_u32([1, 5, 7])
    await tb.run([lookup(0, 2, o, i, tb.out_area(2 * 64), batch=1, tag=1)], "a good LOOKUP")
    await tb.check("after a good LOOKUP")


def _error_cases(tb, committed):
    """(name, descriptor) pairs for every descriptor-level error, interleaved with good
    descriptors; tables 0..2 valid, 3..7 bad directory entries (see the test)."""
    cfg = tb.cfg
    ob = committed + 1
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    ab = cfg.addr_bits
    t0, rows0, dim0 = tb.tables[0]
    o_good = tb.stage_u32([0, 2, 4, 6])
    i_good = tb.stage_u32([1, 2, 3, 1, 5, 6])
    g0 = tb.stage_i32(tb.rng.integers(-2**26, 2**26, (3, dim0)))
    out = tb.out_area(3 * dim0 * 4)

    def lk(**kw):
        d = dict(table=0, n_bags=3, oaddr=o_good, iaddr=i_good, out=out, batch=ob, tag=0)
        d.update(kw)
        return lookup(d.pop("table"), d.pop("n_bags"), d.pop("oaddr"), d.pop("iaddr"),
                      d.pop("out"), **d)

    def up(**kw):
        d = dict(table=0, n_bags=3, oaddr=o_good, iaddr=i_good, grads=g0, batch=ob, tag=0)
        d.update(kw)
        return update(d.pop("table"), d.pop("n_bags"), d.pop("oaddr"), d.pop("iaddr"),
                      d.pop("grads"), **d)

    def raw(**kw):
        return DeviceTB.desc(**kw)

    o_idx = tb.stage_u32([0, 2, 5, 6])
    i_idx = tb.stage_u32([3, 4, 7, rows0, 8, 9])          # bag 1, row 1 out of range
    o_dec = tb.stage_u32([0, 3, 1, 4])                     # bag 1 decreasing
    i_dec = tb.stage_u32([10, 11, 12, 13])
    o_long = tb.stage_u32([0, 1, 2 + cfg.max_bag])         # bag 1 longer than max_bag
    i_end = s1 - 8                                         # indices at the staging end
    o_end = tb.stage_u32([0, 2, 10])                       # bag 1 runs past it
    o_upd = tb.stage_u32([0, 2, 4, 6])
    i_upd = tb.stage_u32([20, 21, 22, 20, rows0 + 5, 23])  # bag 2 row 0 out of range
    g_big = s1 - 64                                        # 3 x 64 B past the staging end
    return [
        ("kind 0", raw(kind=0, tag=1, batch=ob)),
        ("kind 5 (one past SNAPSHOT)", raw(kind=5, tag=2, table=0, batch=ob)),
        ("kind 255", raw(kind=255, tag=3, batch=ob)),
        ("LOOKUP table 8", lk(table=8, tag=4)),
        ("UPDATE table 0xFFFF", up(table=0xFFFF, tag=5)),
        ("LOOKUP+LOG batch C+2", lk(batch=ob + 1, tag=6)),
        ("UPDATE batch C", up(batch=committed, tag=7)),
        ("COMMIT batch C+2", commit(ob + 1, tag=8)),
        ("COMMIT batch 0", commit(0, tag=9)),
        ("COMMIT batch 2^64-1", commit(2**64 - 1, tag=10)),
        ("LOOKUP without LOG, any batch", lk(log=False, batch=12345, tag=11)),
        ("LOOKUP BAD_DIM 304", lk(table=3, tag=12)),
        ("UPDATE BAD_DIM 304", up(table=3, tag=13)),
        ("LOOKUP DIM 2^16", lk(table=4, tag=14)),
        ("UPDATE DIM 2^16", up(table=4, tag=15)),
        ("LOOKUP table base unaligned", lk(table=5, tag=16)),
        ("UPDATE table base unaligned", up(table=5, tag=17)),
        ("LOOKUP out unaligned", lk(out=out + 32, tag=18)),
        ("LOOKUP offsets unaligned", lk(oaddr=o_good + 2, tag=19)),
        ("LOOKUP indices unaligned", lk(iaddr=i_good + 1, tag=20)),
        ("UPDATE grads unaligned", up(grads=g0 + 16, tag=21)),
        ("UPDATE offsets unaligned", up(oaddr=o_good + 1, tag=22)),
        ("LOOKUP table base beyond addr_bits", lk(table=6, tag=23)),
        ("UPDATE table base beyond addr_bits", up(table=6, tag=24)),
        ("LOOKUP table in staging", lk(table=7, tag=25)),
        ("LOOKUP offsets beyond addr_bits", lk(oaddr=1 << (ab + 1), tag=26)),
        ("LOOKUP indices beyond addr_bits", lk(iaddr=(1 << ab) + s0, tag=27)),
        ("LOOKUP out 2^63", lk(out=1 << 63, tag=28)),
        ("UPDATE grads 2^64-64", up(grads=2**64 - 64, tag=29)),
        ("LOOKUP out in the table region", lk(out=t0, tag=30)),
        ("LOOKUP offsets outside staging", lk(oaddr=cfg.log_base, tag=31)),
        ("UPDATE grads past the staging end", up(grads=g_big, tag=32)),
        ("good LOOKUP+LOG", lk(tag=33)),
        ("LOOKUP+LOG INDEX_RANGE bag 1", lk(oaddr=o_idx, iaddr=i_idx, tag=34)),
        ("LOOKUP+LOG OFFSETS_ORDER bag 1", lk(oaddr=o_dec, iaddr=i_dec, tag=35)),
        ("LOOKUP BAG_TOO_LONG bag 1", lk(n_bags=2, oaddr=o_long, tag=36)),
        ("LOOKUP indices end past staging", lk(n_bags=2, oaddr=o_end, iaddr=i_end, tag=37)),
        ("UPDATE OFFSETS_ORDER bag 1 (bag 0 applied)", up(oaddr=o_dec, iaddr=i_dec, tag=38)),
        ("UPDATE BAG_TOO_LONG bag 1", up(n_bags=2, oaddr=o_long, tag=39)),
        ("UPDATE indices end past staging", up(n_bags=2, oaddr=o_end, iaddr=i_end, tag=40)),
        ("UPDATE INDEX_RANGE bag 2 (bags 0, 1 applied)", up(oaddr=o_upd, iaddr=i_upd, tag=41)),
        ("good LOOKUP+LOG at the end", lk(tag=42)),
        ("good LOOKUP on table 1", lookup(1, 0, o_good, i_good, out, batch=ob, tag=43)),
    ]


@cocotb.test()
async def device_descriptor_errors_and_rollback(dut):
    """Every descriptor-level error of docs/training.md and lookup.md (UNKNOWN_KIND, BAD_TABLE,
    WRONG_BATCH, BAD_DIM at the command processor and at the engines, ALIGN, ADDR_RANGE
    including addresses beyond addr_bits, OFFSETS_ORDER, BAG_TOO_LONG, INDEX_RANGE in LOOKUP+LOG
    and in UPDATE with partial application) after a committed batch; completions, memory and
    error CSRs equal the model, later descriptors still run. Then reset + RECOVER rolls the
    partially applied UPDATEs back: tables equal those of the last COMMIT (and the model)."""
    tb = DeviceTB(dut, latency=12, stall=0.05, name="descriptor_errors")
    cfg = tb.cfg
    await tb.power_on()
    await tb.recover()
    specs = [(0, 64, 16, 0.0), (1, 40, 32, 0.0), (2, 16, 128, 0.0)]
    await setup_tables(tb, specs)
    t0 = tb.tables[0][0]
    # table 3: a multiple of 16 that is not a row width, with bit 8 set (304 = 0x130)
    bad_dir = [(3, t0, 8, 304), (4, t0, 8, 1 << 16), (5, t0 + 4, 8, 16),
               (6, 1 << cfg.addr_bits, 4, 16), (7, cfg.staging_base, 4, 16)]
    for tid, base, rows, dim in bad_dir:
        await tb.set_table(tid, base, rows, dim)
    await tb.set_lr(lr_q(tb, 0.1))
    await tb.configure_ring(64)
    good_tables = {t: tb.tables[t] for t in (0, 1, 2)}
    saved = tb.tables
    tb.tables = good_tables
    descs, tag = batch_descs(tb, 1, 1000)
    tb.tables = saved
    await tb.run(descs, "batch 1")
    await tb.check("after batch 1")
    committed_tables = {t: tb.table_bytes(t) for t in (0, 1, 2)}

    cases = _error_cases(tb, 1)
    descs = [d for _, d in cases]
    for k in range(0, len(descs), 20):
        got = await tb.run(descs[k:k + 20], "error batch")
        for (name, _), c in zip(cases[k:k + 20], got):
            dut._log.info(f"{name}: status {E(c['status']).name} value {c['err_value']:#x} "
                          f"bag {c['err_bag']}")
    await tb.check("after the error descriptors")
    applied = {t: tb.table_bytes(t) for t in (0, 1, 2)}
    assert applied[0] != committed_tables[0], tb.where("partial UPDATEs changed nothing")

    # abort the batch: reset + RECOVER rolls back to batch 1
    await tb.power_on()
    await tb.recover()
    await tb.check("after recovery")
    assert await tb.drv.read("RECOVERED_RECORDS") > 0
    for t in (0, 1, 2):
        assert tb.mem.read(good_tables[t][0], len(committed_tables[t])) == committed_tables[t], \
            tb.where(f"table {t} not rolled back to batch 1")
    # and training goes on
    for t, (base, rows, dim) in good_tables.items():
        await tb.set_table(t, base, rows, dim)
    await tb.set_lr(lr_q(tb, 0.1))
    await tb.configure_ring(RING)
    descs, _ = batch_descs(tb, 2, 2000)
    await tb.run(descs, "batch 2 after the rollback")
    await tb.check("after batch 2")


@cocotb.test()
async def device_width_checks_come_before_engine_checks(dut):
    """docs/training.md section 2: the command processor's width checks (DIM >= 2^16, then
    table base, offsets, indices, data address >= 2^addr_bits: ADDR_RANGE) run before the
    engine's lookup.md checks (BAD_DIM, ALIGN, region ADDR_RANGE). Descriptors that fail both
    must report the command processor's error. The RTL is compared with the golden model as
    everywhere; in addition the expected status/value of each case, read off the contract
    here, is asserted (so model and RTL both match the contract, not just each other)."""
    tb = DeviceTB(dut, latency=8, name="width_checks")
    cfg = tb.cfg
    ab = cfg.addr_bits
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, [(0, 32, 16, 0.0)])
    t0 = tb.tables[0][0]
    for tid, base, rows, dim in [(3, t0, 8, 48), (4, t0, 8, 1 << 16), (5, t0 + 4, 8, 16),
                                 (6, 1 << ab, 4, 16)]:
        await tb.set_table(tid, base, rows, dim)
    await tb.configure_ring(RING)
    s0 = cfg.staging_base
    o = tb.stage_u32([0, 1, 2])
    i = tb.stage_u32([1, 2])
    out = tb.out_area(2 * 16 * 4)
    g = tb.stage_i32(np.ones((2, 16), np.int32))
    wide = (1 << ab) + s0                  # in "staging" modulo 2^addr_bits, but too wide
    cases = [
        # (name, descriptor, contract status, contract value)
        ("dim 48 + offsets >= 2^ab", lookup(3, 2, wide, i, out, batch=1, tag=1),
         E.ADDR_RANGE, wide),
        ("out unaligned + indices >= 2^ab", lookup(0, 2, o, wide, out + 32, batch=1, tag=2),
         E.ADDR_RANGE, wide),
        ("out in the table region + indices >= 2^ab", lookup(0, 2, o, wide, t0, batch=1, tag=3),
         E.ADDR_RANGE, wide),
        ("UPDATE grads unaligned + offsets >= 2^ab",
         update(0, 2, wide, i, g + 16, batch=1, tag=4), E.ADDR_RANGE, wide),
        ("table base >= 2^ab + offsets unaligned", lookup(6, 2, o + 2, i, out, batch=1, tag=5),
         E.ADDR_RANGE, 1 << ab),
        ("table base unaligned + out >= 2^ab", lookup(5, 2, o, i, wide, batch=1, tag=6),
         E.ADDR_RANGE, wide),
        ("dim 2^16 + offsets >= 2^ab", lookup(4, 2, wide, i, out, batch=1, tag=7),
         E.BAD_DIM, 1 << 16),
        ("indices >= 2^ab before data >= 2^ab", lookup(0, 2, o, wide, wide + 64, batch=1,
                                                       tag=8), E.ADDR_RANGE, wide),
        ("good LOOKUP+LOG", lookup(0, 2, o, i, out, batch=1, tag=9), E.OK, 0),
    ]
    got = await tb.run([d for _, d, _, _ in cases], "width checks")
    for (name, _, code, value), c in zip(cases, got):     # got == model (compared in run)
        assert (int(c["status"]), int(c["err_value"])) == (int(code), int(value)), tb.where(
            f"width checks, {name}: {E(int(c['status'])).name} {int(c['err_value']):#x}, "
            f"contract {E(code).name} {int(value):#x}")
    await tb.check("after the width-check cases")


# ---------------------------------------------------------------------------- 3. interrupt
@cocotb.test()
async def device_irq_line(dut):
    """``irq = |(IRQ_STATUS & IRQ_ENABLE)``: low after reset; RECOVERED/CPL/ERR each raise it
    only when enabled; it rises once a completion is written (not before the doorbell); write-1
    clears a bit and drops the line."""
    tb = DeviceTB(dut, latency=30, name="irq")
    await tb.power_on()
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0, tb.where("irq high after reset")
    await tb.recover()
    assert int(dut.irq.value) == 0, tb.where("irq high with IRQ_ENABLE = 0")
    await tb.drv.write("IRQ_ENABLE", 4)
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 1, tb.where("RECOVERED enabled but irq low")
    await tb.irq_clear("RECOVERED")
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0, tb.where("irq high after W1C of RECOVERED")
    await tb.check("after RECOVERED cleared")

    await setup_tables(tb, [(0, 64, 64, 0.0)])
    await tb.configure_ring(8)
    await tb.drv.write("IRQ_ENABLE", 1)
    _, rows, dim = tb.tables[0]
    o, i = bags(tb, 8, 6, rows)
    rises = []

    async def watch():
        while True:
            await RisingEdge(dut.irq)
            rises.append(tb.pmem.cycle)

    w = cocotb.start_soon(watch())
    desc = lookup(0, 8, tb.stage_u32(o), tb.stage_u32(i), tb.out_area(8 * dim * 4), batch=1,
                  tag=1)
    await tb.ring_raw([desc])
    t_bell = tb.pmem.cycle
    assert int(dut.irq.value) == 0, tb.where("irq high before the completion")
    await tb.finish("one LOOKUP")
    assert int(dut.irq.value) == 1, tb.where("completion with CPL enabled, irq low")
    assert len(rises) == 1 and rises[0] > t_bell + 30, tb.where(f"irq rises {rises}, "
                                                                f"doorbell at {t_bell}")
    await tb.check("after the completion")
    await tb.irq_clear("CPL")
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0, tb.where("irq high after W1C of CPL")

    # an error descriptor with only ERR enabled
    await tb.drv.write("IRQ_ENABLE", 2)
    await tb.ring_raw([DeviceTB.desc(kind=9, tag=2)])
    await tb.finish("unknown kind")
    assert int(dut.irq.value) == 1, tb.where("ERR enabled, error completed, irq low")
    await tb.check("after the error")
    await tb.irq_clear("ERR")
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0, tb.where("irq high after W1C of ERR (CPL set, disabled)")
    await tb.drv.write("IRQ_ENABLE", 1)
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 1, tb.where("CPL pending and enabled, irq low")
    await tb.drv.write("IRQ_ENABLE", 0)
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0
    await tb.check("end")
    w.cancel()


class ScatterAlloc:
    """Allocations at random places of a region: each takes its own randomly chosen 1 MiB slot
    of ``[base, base + size)`` and a random line-aligned offset inside it, so the addresses a
    test uses take every bit of the region's offset both ways (the bump allocators of
    :class:`DeviceTB` keep to the region's first lines)."""

    def __init__(self, rng, base, size, slot=1 << 20):
        self.rng, self.base, self.slot = rng, base, slot
        self.free = [int(s) for s in rng.permutation(size // slot)]

    def alloc(self, nbytes, align=64):
        assert 0 <= nbytes <= self.slot // 2 and 64 % align == 0, (nbytes, align)
        s = self.free.pop()
        return (self.base + s * self.slot
                + int(self.rng.integers(0, (self.slot - nbytes) // 64)) * 64)


@cocotb.test()
async def device_full_range_fields(dut):
    """Addresses, batch numbers, epochs, tags, table ids and LRs across their whole ranges (the
    other tests keep to small values, low addresses and batch 1): the committed batch and the
    recovery epoch set past 2^40 in the superblock by backdoor on both sides and recovered;
    four tables with random ids and dims, each with up to 2^25 rows at a random base in its
    own quarter of the table region (only the rows used are written); descriptors, index
    lists, gradients, outputs and both rings at random places of the staging region; random
    32-bit tags and LRs. Two batches (LOOKUP+LOG, LOOKUP without LOG, UPDATE, SNAPSHOT of up to
    4000 bytes, COMMIT: without the snapshot the first COMMIT past 2^32 batches would be
    refused with MLP_LAG), then a third cut by a power cycle after its UPDATEs and rolled back
    by recovery, which reports the second snapshot's epoch; then the complements of the
    committed batch and the recovery epoch, recovered, and one more batch. After each step the
    memory image, completions and CSRs equal the model."""
    tb = DeviceTB(dut, latency=16, stall=0.1, name="full_range")
    cfg, rng = tb.cfg, tb.rng
    sb = {n: off for n, off, _ in SB_FIELDS}

    def set_superblock(committed, recovery_epoch):       # by backdoor, as a past run left it
        for name, v in (("committed", committed), ("recovery_epoch", recovery_epoch)):
            tb.poke(cfg.superblock_base + sb[name], v.to_bytes(8, "little"))

    await tb.power_on()
    await tb.recover()
    c = int(rng.integers(1 << 40, 1 << 62))
    set_superblock(c, int(rng.integers(1 << 40, 1 << 62)))
    await tb.power_on()
    assert await tb.recover() == c, tb.where("committed batch not recovered")
    await tb.check("after recovering a large committed batch")
    tb.salloc = ScatterAlloc(rng, cfg.staging_base, cfg.staging_size)
    tids = [int(t) for t in rng.choice(N_TABLES, 4, replace=False)]
    quarter = cfg.table_size // 4
    used, directory = {}, {}
    for tid, dim, q in zip(tids, rng.permutation([16, 32, 64, 128]), rng.permutation(4)):
        dim = int(dim)
        rows = int(rng.integers(1 << 20, quarter // (dim * 4) // 2))
        base = (cfg.table_base + int(q) * quarter
                + int(rng.integers(0, (quarter - rows * dim * 4) // 64)) * 64)
        await tb.set_table(tid, base, rows, dim)
        directory[tid] = (base, rows, dim)
        used[tid] = rng.integers(0, rows, 12)
        for r in used[tid]:
            tb.poke(base + int(r) * dim * 4,
                    rng.integers(-2**26, 2**26, dim).astype("<i4").tobytes())
    await tb.configure_ring(RING, cmd_base=tb.salloc.alloc(DESC_BYTES * RING),
                            cpl_base=tb.salloc.alloc(CPL_BYTES * RING))
    await tb.set_lr(int(rng.integers(1, 1 << cfg.frac_bits)))

    def batch(b):
        looks, upds = [], []
        for tid in tids:
            _, _, dim = tb.tables[tid]
            nb = int(rng.integers(2, 6))
            lens = rng.integers(0, 5, nb)
            o = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
            i = rng.choice(used[tid], int(o[-1])).astype(np.uint32)
            oa, ia = tb.stage_u32(o), tb.stage_u32(i)
            tag = int(rng.integers(0, 1 << 32))
            looks.append(lookup(tid, nb, oa, ia, tb.out_area(nb * dim * 4), batch=b, tag=tag))
            g = (rng.standard_normal((nb, dim)) * (1 << cfg.frac_bits)).astype(np.int32)
            lr = int(rng.integers(1, 1 << cfg.frac_bits)) if rng.random() < 0.5 else None
            upds.append(update(tid, nb, oa, ia, tb.stage_i32(g), batch=b, tag=tag ^ 0xFFFF_FFFF,
                               lr=lr))
        tid = tids[0]
        o = np.array([0, 2, 3], np.uint32)
        infer = lookup(tid, 2, tb.stage_u32(o), tb.stage_u32(rng.choice(used[tid], 3)),
                       tb.out_area(2 * tb.tables[tid][2] * 4), log=False,
                       batch=int(rng.integers(0, 1 << 64, dtype=np.uint64)),
                       tag=int(rng.integers(0, 1 << 32)))
        return looks + [infer] + upds

    async def committed_batch(b):
        n = int(rng.integers(1, 4000))
        src = tb.stage(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        got = await tb.run(batch(b) + [
            DeviceDriver.snapshot_desc(b, src, n, int(rng.integers(0, 1 << 32))),
            commit(b, tag=int(rng.integers(0, 1 << 32)))], f"batch {b:#x}")
        assert all(g["status"] == E.OK for g in got), tb.where(f"batch {b:#x}: {got}")
        await tb.drv.wait_snapshot_idle()       # the model copies at once, the RTL behind
        await tb.check(f"after batch {b:#x}")

    for b in (c + 1, c + 2):
        await committed_batch(b)
    await tb.run(batch(c + 3), f"batch {c + 3:#x} without its COMMIT")
    await tb.check(f"batch {c + 3:#x} applied, not committed")
    await tb.power_on()
    assert await tb.recover() == c + 2, tb.where("recovery did not roll back to c + 2")
    await tb.check("after the rollback of the uncommitted batch")
    st = await tb.drv.mlp_state()
    assert st["epoch"] == c + 2 and st["slot"] in (1, 2), tb.where(f"MLP state {st}")
    # the complements of the committed batch and the recovery epoch (bits 0-62), so that every
    # bit of them is set in one of the two and clear in the other
    c2 = ~c & ((1 << 63) - 1)
    set_superblock(c2, ~tb.model.recovery_epoch & ((1 << 63) - 1))
    await tb.power_on()
    assert await tb.recover() == c2, tb.where("complemented committed batch not recovered")
    await tb.configure_ring(RING, cmd_base=tb.salloc.alloc(DESC_BYTES * RING),
                            cpl_base=tb.salloc.alloc(CPL_BYTES * RING))
    for tid in tids:
        await tb.set_table(tid, *directory[tid])
    await tb.set_lr(int(rng.integers(1, 1 << cfg.frac_bits)))
    await committed_batch(c2 + 1)


# ---- pytest launcher ----------------------------------------------------------------------------
MIN_TESTS = 49     # cocotb tests in tests/cosim/device/test_device.py, parametrized variants counted


@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_device_cosim(device_build, seed, tmp_path):
    """All device cocotb tests pass (completions, memory image and CSRs equal to the model)."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
