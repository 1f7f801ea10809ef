"""cocotb tests: media errors (RRESP/BRESP != OKAY from the PMEM model) on the full device top.

Faults come from the PMEM model's fault rules (:class:`cosim.pmem.MediaFault`); every fault
the model injects is listed in ``pmem.faults`` and each test checks that the descriptor during
which it was injected completed with ``MEDIA`` (or, for the host read, that the data came back
poisoned). No test may hang: every wait has a timeout (``DeviceDriver.submit``), which fails
the test.

Expected values never come from the RTL: table contents are the bytes the test generated,
or the golden model's (``sw_model.training.TrainingDevice.execute``) for fault-free
descriptors. After a media error the batch is aborted the documented way (reset + RECOVER,
docs/training.md section 4) and the tables must equal the committed state; then the batch is
run again without faults and must equal the model.

Tests: a LOOKUP+LOG whose row read fails (the undo record of the untrusted data must not be
valid, the row must not count as logged: a later UPDATE logs it itself, and an abort restores
the row's true contents), also with a new row of the same logged-set set looked up in the
cycle the failed row is removed; UPDATE with a fault on each of its reads and writes and on
the logger's synchronous path (row read, record write; the error reports the row's bag); COMMIT
with the superblock write failing; LOOKUP without LOG on each of its reads; seeded random
faults over whole batches (every fault reported); recovery meeting a read or write error
(reported, stops unready, a retry restores the rows; a record whose data line read fails is not
applied even when its CRC matches); a completion record write that fails (reported in the error
registers); a SNAPSHOT copy meeting a read or write error (reported, the MLP slot unchanged, a
retry works; after a read error no line but the copy's own is written); a host read (CXL.mem
MemRd) of a line whose media read fails returns poisoned data; a line the host wrote with
poison stays poisoned across a power failure and recovery (host read poison, LOOKUP MEDIA)
until a full-line clean write.

Pytest launcher (end of file): one launch of the device build shared with tests/cosim/device.
"""
import random

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb
from cosim.pmem import MediaFault
from cosim.powerfail import power_fail
from cosim.tb.config import BenchConfig
from cosim.tb.device import E, K, commit, lookup, update
from hw.config import DeviceConfig
from hw.encodings import DESC_FIELDS, unpack_fields
from sw_model.training import slot_addr
from trainingcxl.faults.bench import (LINE, check_log_trustworthy, check_reported, check_tables,
                                      expect_status, fresh, grads, log_records, model_run,
                                      model_tables, random_batch, restore_config, row_addr,
                                      row_lines, staged_bags, submit)


# ---------------------------------------------------------------------------- 1. LOOKUP+LOG
@cocotb.test()
@cocotb.parametrize(line=[0, 2, 3], one_shot=[False, True])
async def media_lookup_log_row_never_logged_valid(dut, line, one_shot):
    """A LOOKUP+LOG whose read of line ``line`` of row R fails (twice R in the bags: a
    permanent fault fails both reads, a one-shot only the first): MEDIA; no valid undo record
    holds anything but the rows' true contents; R is not taken as logged, so the UPDATE of R
    in the same batch logs it itself (valid record of the true row); an abort (reset +
    RECOVER) restores every table to its generated contents; the batch then runs without
    faults and equals the model."""
    tb = await fresh(dut, f"lookup_log/line{line}/{'once' if one_shot else 'perm'}",
                     [(0, 64, 64, 0.0), (1, 48, 16, 0.0)])
    dirs = dict(tb.tables)
    gen = {tid: tb.table_bytes(tid) for tid in tb.tables}   # bytes the test generated
    assert gen == model_tables(tb)
    R = 9
    offs, idx = [0, 3, 5], [3, R, 5, R, 7]
    oa, ia = staged_bags(tb, offs, idx)
    look = lookup(0, 2, oa, ia, tb.out_area(2 * 64 * 4), batch=1, tag=1)
    look1 = lookup(1, 1, *staged_bags(tb, [0, 3], [2, 4, 2]), tb.out_area(64), batch=1, tag=2)
    upd = update(0, 2, oa, ia, grads(tb, 2, 64), batch=1, tag=3)
    lo, hi = row_lines(tb, 0, R, line)
    tb.pmem.add_fault(MediaFault(op="read", lo=lo, hi=hi, count=1 if one_shot else None,
                                 name="row R"))

    (c_look, c_look1), faults = await submit(tb, [look, look1], "LOOKUP+LOG")
    assert faults and all(lo <= f.addr < hi for f in faults), tb.where(f"faults {faults}")
    expect_status(tb, c_look, E.MEDIA, "LOOKUP+LOG with a failed row read")
    expect_status(tb, c_look1, E.OK, "the next LOOKUP+LOG (no fault)")
    tb.pmem.clear_faults()
    await ClockCycles(dut.clk, 400)          # the LOOKUPs' record writes land
    recs = check_log_trustworthy(tb, gen, "after the LOOKUPs")
    assert any(r["valid"] for r in recs), tb.where("no valid record at all")

    want = model_run(tb, [look, look1, upd])  # the model's tables after the fault-free batch
    (c_upd,), faults = await submit(tb, [upd], "UPDATE")
    assert not faults
    expect_status(tb, c_upd, E.OK, "UPDATE after the failed LOOKUP")
    for f in ("rows", "sat", "lines"):
        assert int(c_upd[f]) == int(want[2][f]), tb.where(f"UPDATE {f} {c_upd[f]} "
                                                          f"model {want[2][f]}")
    check_tables(tb, model_tables(tb), "after the UPDATE")
    recs = check_log_trustworthy(tb, gen, "after the UPDATE")
    assert any(r["valid"] and r["table"] == 0 and r["row"] == R for r in recs), tb.where(
        f"row {R} was updated without a valid undo record (still counted as logged after "
        f"its failed read)")

    # abort: the model aborts the same batch from its own log
    await tb.power_on()
    await tb.recover()
    await restore_config(tb, dirs)
    check_tables(tb, gen, "after reset + recovery (batch 1 aborted)")
    descs = [look, look1, upd, commit(1, tag=4)]
    got = await tb.run(descs, "batch 1 again, no fault")
    assert [int(c["status"]) for c in got] == [0] * 4
    check_tables(tb, model_tables(tb), "after batch 1")


@cocotb.test()
@cocotb.parametrize(latency=[1, 16, 30])
async def media_lookup_log_failed_row_then_a_row_of_its_set(dut, latency):
    """Rounds in one batch at PMEM latency ``latency``, each in a logged-set set S of its own
    (bit 5 of S clear; table 0, dim 16): a LOOKUP+LOG of five rows of S (ways 0..4), then a
    LOOKUP+LOG whose bags are [A], ``e`` empty bags, [B], with A and B new rows of S and the
    read of A's line failing (MEDIA: A's record must not be valid, and A is removed from the
    set in the cycle after its line), then an UPDATE of A, which must log A itself. ``e`` runs
    from 0 to 47, so that B reaches the logger's lookup stage at 48 different times after A;
    one of them is the cycle of A's removal (seen at ``e`` = latency + 7 on the RTL of
    314cb09), where B's set answer must already show A's way free. After the rounds every A
    has a valid undo record and no valid record holds anything but its row's true contents.
    Written for mutants 42 of ``hw/undolog/logged_set.py:183`` (``remove_set == in_set`` with
    bit 9 of the removal's set inverted while its bit 5 is clear) and 66 of
    ``logged_set.py:279`` (way 5 of a removal made while a key is loaded dropped from the
    loaded key's patch): B's answer kept A's way valid, B's insert wrote it back, and A was
    updated without a valid record."""
    from sw_model.training import log_set_index
    n_rows, dim = 1 << 14, 16
    tb = await fresh(dut, f"lookup_log_removal/lat{latency}", [(0, n_rows, dim, 0.0)],
                     latency=latency)
    cfg, rng = tb.cfg, tb.rng
    sets = cfg.log_set_sets
    lo = sets.bit_length() - 1
    gen = {tid: tb.table_bytes(tid) for tid in tb.tables}
    his = list(range(n_rows >> lo))
    n_rounds = 48
    todo = [int(s) for s in rng.permutation(sets) if not s & 32][:n_rounds]
    tag, bad_rows = 1, []
    for e, s in enumerate(todo):
        rows = [int(h) << lo | ((s ^ int(h)) & (sets - 1)) for h in rng.permutation(his)[:7]]
        assert all(log_set_index(sets, 0, r) == s for r in rows), (rows, s)
        fill, a_row, b_row = rows[:5], rows[5], rows[6]
        bad_rows.append(a_row)
        oa, ia = staged_bags(tb, [0, 5], fill)
        (c,), _ = await submit(tb, [lookup(0, 1, oa, ia, tb.out_area(dim * 4), batch=1,
                                           tag=tag)], f"round {e}: fill set {s}")
        expect_status(tb, c, E.OK, f"round {e}: LOOKUP+LOG of the set's first rows")
        offs = [0] + [1] * (e + 1) + [2]
        oa, ia = staged_bags(tb, offs, [a_row, b_row])
        lo_a, hi_a = row_lines(tb, 0, a_row, 0)
        tb.pmem.add_fault(MediaFault(op="read", lo=lo_a, hi=hi_a, count=1, name="row A"))
        out = tb.out_area((e + 2) * dim * 4)
        (c,), faults = await submit(tb, [lookup(0, e + 2, oa, ia, out, batch=1, tag=tag + 1)],
                                    f"round {e}: A, B")
        assert len(faults) == 1, tb.where(f"round {e}: faults {faults}")
        expect_status(tb, c, E.MEDIA, f"round {e}: LOOKUP+LOG with A's read failing")
        tb.pmem.clear_faults()
        oa, ia = staged_bags(tb, [0, 1], [a_row])
        (c,), faults = await submit(tb, [update(0, 1, oa, ia, grads(tb, 1, dim), batch=1,
                                                tag=tag + 2)], f"round {e}: UPDATE of A")
        assert not faults
        expect_status(tb, c, E.OK, f"round {e}: UPDATE of A")
        tag += 3
    await ClockCycles(dut.clk, 400)          # the last record writes land
    recs = log_records(tb, n_slots=8 * n_rounds + 64)
    check_log_trustworthy(tb, gen, "after the rounds")
    for e, a_row in enumerate(bad_rows):
        assert any(r["valid"] and r["table"] == 0 and r["row"] == a_row for r in recs), \
            tb.where(f"round {e} (set {todo[e]}): row {a_row} was updated without a valid "
                     f"undo record (still counted as logged after its failed read)")


# ---------------------------------------------------------------------------- 2. UPDATE
UPDATE_FAULTS = ["row_read", "row_write", "grads", "offsets", "indices", "ensure_read",
                 "log_write", "tee_log_write"]


@cocotb.test()
@cocotb.parametrize(where=UPDATE_FAULTS)
async def media_update_reports_and_rolls_back(dut, where):
    """An UPDATE with one failing access (``where``: the engine's row read, row write,
    gradient/offsets/indices read; the logger's synchronous row read or record write, rows not
    logged by a LOOKUP; or a record write of the LOOKUP+LOG before it, ``tee_log_write``, which
    the LOOKUP cannot report as its records land after it: the UPDATE and a COMMIT are then
    refused): MEDIA, no hang, every valid undo record holds true contents; reset + RECOVER
    restores the generated tables; the batch then runs without faults and equals the model."""
    tb = await fresh(dut, f"update/{where}", [(0, 64, 32, 0.0)])
    dirs = dict(tb.tables)
    gen = {0: tb.table_bytes(0)}
    offs, idx = [0, 4, 7], [1, 5, 9, 5, 12, 1, 20]
    oa, ia = staged_bags(tb, offs, idx)
    ga = grads(tb, 2, 32)
    logged_by_lookup = where not in ("ensure_read", "log_write")
    descs = []
    if logged_by_lookup:
        descs.append(lookup(0, 2, oa, ia, tb.out_area(2 * 32 * 4), batch=1, tag=1))
    upd = update(0, 2, oa, ia, ga, batch=1, tag=2)
    R = 9
    cfg = tb.cfg
    if where == "tee_log_write":   # the LOOKUP's second record (slot 1): its first line
        tb.pmem.add_fault(op="write", lo=slot_addr(cfg, 1), hi=slot_addr(cfg, 2), count=1,
                          name=where)
    if descs:
        (c,), faults = await submit(tb, descs, "LOOKUP+LOG")
        expect_status(tb, c, E.OK, "LOOKUP+LOG")
        model_run(tb, descs)
    rule = {
        "row_read": dict(op="read", lo=row_lines(tb, 0, R)[0], hi=row_lines(tb, 0, R)[1]),
        "row_write": dict(op="write", lo=row_lines(tb, 0, R)[0], hi=row_lines(tb, 0, R)[1]),
        "grads": dict(op="read", lo=ga + 128, hi=ga + 192),
        "offsets": dict(op="read", lo=oa, hi=oa + 4),
        "indices": dict(op="read", lo=ia, hi=ia + 4),
        # rows 1, 5, 9 are logged in this order by the synchronous path: fail row 9's read
        "ensure_read": dict(op="read", lo=row_lines(tb, 0, R)[0], hi=row_lines(tb, 0, R)[1],
                            count=1),
        "log_write": dict(op="write", lo=slot_addr(cfg, 1), hi=slot_addr(cfg, 2), count=1),
        "tee_log_write": None,
    }[where]
    if rule is not None:
        tb.pmem.add_fault(name=where, **rule)
    n0 = len(tb.pmem.faults) if rule is not None else 0
    (c,), _ = await submit(tb, [upd], "UPDATE")
    faults = tb.pmem.faults[n0:]
    assert len(faults) >= 1, tb.where(f"{where}: no fault injected (rule {rule})")
    expect_status(tb, c, E.MEDIA, f"UPDATE with a {where} fault")
    tb.pmem.clear_faults()
    check_log_trustworthy(tb, gen, f"after the UPDATE ({where})")
    if where in ("tee_log_write", "ensure_read", "log_write"):
        # the logger's failure stays until the batch is aborted: COMMIT is refused too
        (c,), _ = await submit(tb, [commit(1, tag=5)], "COMMIT")
        expect_status(tb, c, E.MEDIA, f"COMMIT after a {where} fault")
        assert await tb.drv.read64("COMMITTED") == 0

    await tb.power_on()
    await tb.recover()
    await restore_config(tb, dirs)
    check_tables(tb, gen, f"{where}: after reset + recovery (batch 1 aborted)")
    look = lookup(0, 2, oa, ia, tb.out_area(2 * 32 * 4), batch=1, tag=3)
    got = await tb.run([look, upd, commit(1, tag=4)], "batch 1 again, no fault")
    assert [int(c["status"]) for c in got] == [0] * 3
    check_tables(tb, model_tables(tb), "after batch 1")


@cocotb.test()
async def media_update_logging_fault_reports_the_rows_bag(dut):
    """An UPDATE of three bags whose synchronous logging of row R (no LOOKUP logged it), the
    last item of bag 2, meets a failed read: MEDIA with ``err_bag`` 2, the bag of the row
    (docs/training.md, media errors; bag 2 set by the test), ``err_value`` 0; reset + RECOVER
    restores the generated table. Written for mutant 67 (``hw/update/row_reader.py:84``: bit
    28 of the bag number inverted, in the item FIFO, for the last item of a bag: it reaches
    only the bag a logging error reports)."""
    tb = await fresh(dut, "update/ensure_read_bag", [(0, 64, 16, 0.0)])
    dirs = dict(tb.tables)
    gen = {0: tb.table_bytes(0)}
    R = 9
    offs, idx = [0, 2, 4, 7], [1, 5, 3, 6, 12, 20, R]
    oa, ia = staged_bags(tb, offs, idx)
    lo, hi = row_lines(tb, 0, R)
    tb.pmem.add_fault(op="read", lo=lo, hi=hi, count=1, name="row R, logger's read")
    (c,), faults = await submit(tb, [update(0, 3, oa, ia, grads(tb, 3, 16), batch=1, tag=1)],
                                "UPDATE")
    assert faults, tb.where("no fault injected")
    expect_status(tb, c, E.MEDIA, "UPDATE whose logging read of row R fails")
    assert (int(c["err_bag"]), int(c["err_value"])) == (2, 0), tb.where(
        f"err_bag {c['err_bag']} err_value {c['err_value']}, expected 2 and 0")
    tb.pmem.clear_faults()
    await tb.power_on()
    await tb.recover()
    await restore_config(tb, dirs)
    check_tables(tb, gen, "after reset + recovery (batch 1 aborted)")


# ---------------------------------------------------------------------------- 3. COMMIT
@cocotb.test()
async def media_commit_superblock_write_fails(dut):
    """COMMIT whose superblock write answers SLVERR (not applied): MEDIA, COMMITTED unchanged;
    reset + RECOVER rolls the batch back to the generated tables (C = 0); the batch again with
    a working media commits and equals the model."""
    tb = await fresh(dut, "commit", [(0, 40, 16, 0.0)])
    dirs = dict(tb.tables)
    gen = {0: tb.table_bytes(0)}
    oa, ia = staged_bags(tb, [0, 3, 6], [1, 2, 3, 2, 8, 30])
    descs = [lookup(0, 2, oa, ia, tb.out_area(2 * 64), batch=1, tag=1),
             update(0, 2, oa, ia, grads(tb, 2, 16), batch=1, tag=2)]
    got, faults = await submit(tb, descs, "LOOKUP+UPDATE")
    assert [int(c["status"]) for c in got] == [0, 0] and not faults
    sb = tb.cfg.superblock_base
    tb.pmem.add_fault(op="write", lo=sb, hi=sb + LINE, name="superblock")
    (c,), faults = await submit(tb, [commit(1, tag=3)], "COMMIT")
    assert len(faults) == 1, tb.where(f"faults {faults}")
    expect_status(tb, c, E.MEDIA, "COMMIT with the superblock write failing")
    assert await tb.drv.read64("COMMITTED") == 0, tb.where("COMMITTED advanced")
    tb.pmem.clear_faults()
    await tb.power_on()
    await tb.recover()       # the model is still at C = 0 (it ran nothing)
    await restore_config(tb, dirs)
    check_tables(tb, gen, "after reset + recovery")
    got = await tb.run(descs + [commit(1, tag=3)], "batch 1 again")
    assert [int(c["status"]) for c in got] == [0] * 3
    assert await tb.drv.read64("COMMITTED") == 1
    check_tables(tb, model_tables(tb), "after batch 1")


# ---------------------------------------------------------------------------- 4. LOOKUP
@cocotb.test()
@cocotb.parametrize(where=["offsets", "indices", "row", "out_write"])
async def media_lookup_no_log(dut, where):
    """A LOOKUP without LOG with one failing access (offsets, indices, row read, output
    write): MEDIA, no hang, tables untouched; the same LOOKUP without the fault equals the
    model."""
    tb = await fresh(dut, f"lookup/{where}", [(0, 64, 32, 0.0)])
    gen = {0: tb.table_bytes(0)}
    oa, ia = staged_bags(tb, [0, 2, 5], [4, 7, 4, 11, 2])
    out = tb.out_area(2 * 32 * 4)
    rule = {"offsets": dict(op="read", lo=oa, hi=oa + 4),
            "indices": dict(op="read", lo=ia, hi=ia + 4),
            "row": dict(op="read", lo=row_lines(tb, 0, 7)[0], hi=row_lines(tb, 0, 7)[1]),
            "out_write": dict(op="write", lo=out, hi=out + 2 * 32 * 4)}[where]
    tb.pmem.add_fault(name=where, **rule)
    desc = lookup(0, 2, oa, ia, out, log=False, tag=1)
    (c,), faults = await submit(tb, [desc], "LOOKUP")
    assert faults
    expect_status(tb, c, E.MEDIA, f"LOOKUP with a {where} fault")
    check_tables(tb, gen, "after the LOOKUP")
    tb.pmem.clear_faults()
    want = model_run(tb, [desc])[0]
    (c,), _ = await submit(tb, [desc], "LOOKUP again")
    expect_status(tb, c, E.OK, "LOOKUP without the fault")
    assert tb.mem.read(out, 2 * 32 * 4) == tb.model.mem.read(out, 2 * 32 * 4)
    assert int(c["rows"]) == int(want["rows"])


# ---------------------------------------------------------------------------- 5. random faults
@cocotb.test()
@cocotb.parametrize(trial=[0, 1, 2])
async def media_random_faults_every_one_reported(dut, trial):
    """Seeded random faults (per burst, probability 0.5 / 1.5 / 4 % by trial: reads and writes
    of the tables, writes of the log, reads and writes of the batch's staging data; ten times
    that, at most 25 %, on superblock writes)
    during batches of LOOKUP+LOG / UPDATE / COMMIT, one descriptor per doorbell. Every
    descriptor during which a fault was injected completes with MEDIA, and none without one
    (a failed record write of a LOOKUP is reported by the next UPDATE or COMMIT); records
    recovery would apply hold only true contents; a batch with a MEDIA is aborted (reset +
    RECOVER) and every table equals the model's committed state, then the batch runs again
    without faults and equals the model; no hang."""
    tb = await fresh(dut, f"random/{trial}", [(0, 48, 32, 0.0), (1, 32, 16, 0.0)])
    dirs = dict(tb.tables)
    cfg = tb.cfg
    p = (0.005, 0.015, 0.04)[trial]   # from mostly clean batches to mostly aborted ones
    dut._log.info(f"random faults trial {trial}: seed={tb.seed} p={p}")
    n_faults, n_media, n_aborts, tag = 0, 0, 0, 1
    for batch in range(1, 5):
        descs, (s_lo, s_hi) = random_batch(tb, batch, tag)
        tag += len(descs)
        before = model_tables(tb)
        for attempt in ("faults", "clean"):
            if attempt == "faults":
                for spec in (
                        MediaFault(op="rw", lo=cfg.table_base, hi=cfg.table_base + cfg.table_size,
                                   probability=p, name="tables"),
                        MediaFault(op="write", lo=cfg.log_base, hi=cfg.log_base + cfg.log_size,
                                   probability=p, name="log"),
                        MediaFault(op="rw", lo=s_lo, hi=s_hi, probability=p, name="staging"),
                        MediaFault(op="write", lo=cfg.superblock_base,
                                   hi=cfg.superblock_base + LINE, probability=min(0.25, 10 * p),
                                   name="superblock")):
                    tb.pmem.add_fault(spec)
            log_failed = False       # a record write of this attempt failed
            failed = False
            for d in descs:
                kind = K(unpack_fields(DESC_FIELDS, d)["kind"])
                if failed and kind != K.LOOKUP:
                    break            # after a MEDIA of UPDATE/COMMIT: abort the attempt
                (c,), new = await submit(tb, [d], f"batch {batch} {kind.name}")
                n_faults += len(new)
                what = f"batch {batch} ({attempt}) {kind.name} tag {c['tag']}, faults {new}"
                media, log_failed = check_reported(tb, kind, c, new, log_failed, what)
                if media:
                    n_media += 1
                    failed = True
                elif kind != K.COMMIT or not failed:
                    model_run(tb, [d])       # the model follows what the RTL completed
            tb.pmem.clear_faults()
            await ClockCycles(dut.clk, 200)
            if not failed:
                check_tables(tb, model_tables(tb), f"batch {batch} ({attempt}) committed")
                assert await tb.drv.read64("COMMITTED") == batch
                break
            assert attempt == "faults", tb.where(f"batch {batch} failed without faults")
            check_log_trustworthy(tb, before, f"batch {batch} after MEDIA")
            n_aborts += 1
            await tb.power_on()
            await tb.recover()
            await restore_config(tb, dirs)
            check_tables(tb, before, f"batch {batch} aborted")
    dut._log.info(f"random faults trial {trial}: {n_faults} faults injected, {n_media} MEDIA "
                  f"completions, {n_aborts} batches aborted")
    assert tb.model.committed == 4


# ---------------------------------------------------------------------------- 6. recovery
async def _aborted_batch(dut, name):
    """A fresh device with table 0 (64 rows of dim 64) and batch 1 applied, not committed:
    LOOKUP+LOG and UPDATE of rows 2, 9, 4, 11, logged in slots 0-3 (four data lines each).
    Returns the bench, the table directory, the generated and the updated table 0, and the
    valid undo records."""
    tb = await fresh(dut, name, [(0, 64, 64, 0.0)])
    dirs = dict(tb.tables)
    gen = {0: tb.table_bytes(0)}
    oa, ia = staged_bags(tb, [0, 3, 6], [2, 9, 4, 9, 11, 2])
    descs = [lookup(0, 2, oa, ia, tb.out_area(2 * 256), batch=1, tag=1),
             update(0, 2, oa, ia, grads(tb, 2, 64), batch=1, tag=2)]
    got, _ = await submit(tb, descs, "batch 1")
    assert [int(c["status"]) for c in got] == [0, 0]
    model_run(tb, descs)
    updated = tb.table_bytes(0)
    assert updated != gen[0], tb.where("batch 1 changed nothing")
    recs = [r for r in log_records(tb) if r["valid"]]
    assert [r["row"] for r in recs] == [2, 9, 4, 11], tb.where(f"records {recs}")
    return tb, dirs, gen, updated, recs


async def _recovery_fails(tb, what):
    """Power cycle, then RECOVER, which must stop with an error (the fault ``what`` hit)."""
    from cosim.device_driver import DriverError
    await tb.power_on()
    try:
        await tb.drv.recover()
    except DriverError as e:
        tb.dut._log.info(f"recovery with {what}: {e}")
    else:
        raise AssertionError(tb.where(f"recovery with {what} completed"))
    assert tb.pmem.faults, tb.where("no fault injected")


@cocotb.test()
@cocotb.parametrize(where=["data", "header", "row_write"])
async def media_recovery_reports_and_retries(dut, where):
    """Recovery of an aborted batch (LOOKUP+LOG and UPDATE applied, no COMMIT) meets one media
    error (``where``: a record data line read, a record header read, a rollback row write):
    it reports ``MEDIA`` (ERR_CODE, value 0) and stops unready instead of completing with a
    row not rolled back; RECOVER again (fault gone) completes and every table equals the
    generated contents."""
    tb, dirs, gen, _, recs = await _aborted_batch(dut, f"recovery/{where}")
    a1 = slot_addr(tb.cfg, 1)
    rule = {"data": dict(op="read", lo=a1 + 2 * LINE, hi=a1 + 3 * LINE),
            "header": dict(op="read", lo=a1, hi=a1 + LINE),
            "row_write": dict(op="write", lo=recs[1]["addr"], hi=recs[1]["addr"] + 256)}[where]
    tb.pmem.add_fault(name=where, **rule)
    await _recovery_fails(tb, f"a {where} fault")
    assert await tb.drv.read("ERR_CODE") == E.MEDIA and await tb.drv.read64("ERR_VALUE") == 0
    assert not await tb.drv.read("STATUS") & 4, tb.where("READY after a failed recovery")
    tb.pmem.clear_faults()
    await tb.err_clear()
    await tb.recover()
    await restore_config(tb, dirs)
    check_tables(tb, gen, f"after the retried recovery ({where})")


@cocotb.test()
async def media_recovery_record_read_with_error_is_not_applied(dut):
    """Recovery of an aborted batch (rows 2, 9, 4, 11 logged in slots 0-3, dim 64: four data
    lines per record) where the read of data line 1 of slot 1 answers SLVERR with the true
    contents (so its CRC still matches): that record is not trusted and not applied, every
    other record is (docs/training.md section 6, media errors); recovery reports ``MEDIA``
    and stays unready. After it, slot 1's row still holds its updated value and the other
    three rows their generated ones; RECOVER again (fault gone) restores all. Written for
    mutant 56 (``hw/persist/apply.py:184``: ``dk != 0`` inverted in the copy of the record's
    error accumulation that the CRC check takes, so an error on a line before the last is
    forgotten)."""
    line = 1
    tb, dirs, gen, updated, _ = await _aborted_batch(dut, "recovery/data_mem")
    a1 = slot_addr(tb.cfg, 1)
    tb.pmem.add_fault(op="read", lo=a1 + (1 + line) * LINE, hi=a1 + (2 + line) * LINE,
                      data="mem", name=f"slot 1 data line {line}")
    await _recovery_fails(tb, "a data line fault")
    assert await tb.drv.read("ERR_CODE") == E.MEDIA
    rb = 64 * 4
    now = tb.mem.read(tb.bases[0], len(gen[0]))
    for r in (2, 9, 4, 11):
        want = (updated if r == 9 else gen[0])[r * rb:(r + 1) * rb]
        assert now[r * rb:(r + 1) * rb] == want, tb.where(
            f"row {r} after the failed recovery: {'rolled back' if r == 9 else 'not rolled back'}")
    tb.pmem.clear_faults()
    await tb.err_clear()
    await tb.recover()
    await restore_config(tb, dirs)
    check_tables(tb, gen, "after the retried recovery")


# ---------------------------------------------------------------------------- 7. completion
@cocotb.test()
async def media_completion_write_fails(dut):
    """The write of a completion record answers SLVERR (not applied): the ring still advances
    (no hang) and the error registers report MEDIA with the completion slot; the LOOKUP itself
    ran (outputs equal the model's) and the next descriptor completes normally. Then a
    descriptor read answers SLVERR: its completion is MEDIA and nothing is executed."""
    tb = await fresh(dut, "completion", [(0, 32, 16, 0.0)])
    oa, ia = staged_bags(tb, [0, 2, 3], [4, 7, 9])
    out = tb.out_area(2 * 64)
    desc = lookup(0, 2, oa, ia, out, log=False, tag=1)
    slot = tb.drv.tail
    a = tb.drv.cpl_base + 64 * slot
    tb.pmem.add_fault(op="write", lo=a, hi=a + LINE, count=1, name="completion")
    (c,), faults = await submit(tb, [desc], "LOOKUP")
    assert len(faults) == 1, tb.where(f"faults {faults}")
    assert int(c["tag"]) != 1, tb.where("the failed completion write reached the ring")
    st = await tb.drv.read("STATUS")
    assert st & 2 and await tb.drv.read("ERR_CODE") == E.MEDIA, tb.where(f"STATUS {st:#x}")
    assert await tb.drv.read64("ERR_VALUE") == slot
    model_run(tb, [desc])
    assert tb.mem.read(out, 2 * 64) == tb.model.mem.read(out, 2 * 64)
    (c,), faults = await submit(tb, [lookup(0, 2, oa, ia, out, log=False, tag=2)], "LOOKUP 2")
    assert not faults and int(c["tag"]) == 2
    expect_status(tb, c, E.OK, "the next LOOKUP")
    # the descriptor read fails: MEDIA, nothing executed (the output area keeps its bytes)
    slot = tb.drv.tail
    a = tb.drv.ring_base + 64 * slot
    tb.pmem.add_fault(op="read", lo=a, hi=a + LINE, count=1, name="descriptor")
    before = tb.mem.read(out, 2 * 64)
    tb.poke(out, bytes(2 * 64))
    (c,), faults = await submit(tb, [lookup(0, 2, oa, ia, out, log=False, tag=3)], "LOOKUP 3")
    assert len(faults) == 1
    expect_status(tb, c, E.MEDIA, "a descriptor read in error")
    assert tb.mem.read(out, 2 * 64) == bytes(2 * 64) != before, tb.where("LOOKUP 3 ran")


# ---------------------------------------------------------------------------- 8. snapshot
async def snapshot_that_fails(tb, src, length):
    """A SNAPSHOT of epoch 1 (``length`` bytes at ``src``) whose copy meets the one fault armed
    in the PMEM model: the descriptor completes OK (before its copy), the copy ends with
    ERR_CODE = MEDIA and the epoch as ERR_VALUE, and MLP_SLOT/MLP_EPOCH stay (0, 0)."""
    from cosim.device_driver import DeviceDriver
    (c,), _ = await submit(tb, [DeviceDriver.snapshot_desc(1, src, length, 1)], "SNAPSHOT")
    expect_status(tb, c, E.OK, "SNAPSHOT (completed before its copy)")
    await tb.drv.wait_snapshot_idle()
    assert len(tb.pmem.faults) == 1, tb.where(f"faults {tb.pmem.faults}")
    assert await tb.drv.read("ERR_CODE") == E.MEDIA and await tb.drv.read64("ERR_VALUE") == 1
    assert (await tb.drv.read("MLP_SLOT"), await tb.drv.read64("MLP_EPOCH")) == (0, 0), \
        tb.where("a failed snapshot became the MLP slot")


@cocotb.test()
@cocotb.parametrize(where=["source_read", "slot_write", "header_write"])
async def media_snapshot_copy_reports(dut, where):
    """A SNAPSHOT whose background copy meets one media error (a source line read, a payload
    line write, the slot header write): its completion is OK (written at once, section 9), the
    copy stops and reports ERR_CODE = MEDIA with the epoch, MLP_SLOT/MLP_EPOCH stay unchanged;
    the same SNAPSHOT again without the fault completes and its slot holds the payload."""
    from cosim.device_driver import DeviceDriver
    from sw_model.training import snap_slot_addr
    tb = await fresh(dut, f"snapshot/{where}", [(0, 16, 16, 0.0)])
    payload = tb.rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    src = tb.stage(payload)
    slot_a = snap_slot_addr(tb.cfg, 0)
    rule = {"source_read": dict(op="read", lo=src + 2 * LINE, hi=src + 3 * LINE),
            "slot_write": dict(op="write", lo=slot_a + 5 * LINE, hi=slot_a + 6 * LINE),
            "header_write": dict(op="write", lo=slot_a, hi=slot_a + LINE)}[where]
    tb.pmem.add_fault(name=where, count=1, **rule)
    await snapshot_that_fails(tb, src, len(payload))
    await tb.err_clear()
    (c,), faults = await submit(tb, [DeviceDriver.snapshot_desc(1, src, len(payload), 2)],
                                "SNAPSHOT again")
    expect_status(tb, c, E.OK, "SNAPSHOT again")
    await tb.drv.wait_snapshot_idle()
    assert not faults and not await tb.drv.read("STATUS") & 2
    slot = await tb.drv.read("MLP_SLOT")
    assert slot in (1, 2) and await tb.drv.read64("MLP_EPOCH") == 1
    assert tb.mem.read(snap_slot_addr(tb.cfg, slot - 1) + LINE, len(payload)) == payload


@cocotb.test()
@cocotb.parametrize(off=[0, 24])
async def media_snapshot_copy_stops_writing_at_a_read_error(dut, off):
    """A SNAPSHOT of 1000 bytes at source offset ``off`` whose source line 8 read answers
    SLVERR: after the error the copy writes nothing more. Both slots' first 20 lines are
    filled with a pattern before; after the failed copy every line of them is the pattern or,
    for payload line j of the slot the copy used, exactly what a complete copy writes there
    (its bytes of the payload, the pattern under the last line's unwritten bytes): no line is
    written with data of the wrong source line, and the header line stays the pattern.
    ERR_CODE = MEDIA with the epoch, MLP_SLOT/MLP_EPOCH unchanged. Written for mutant 32 of
    ``hw/snapshot/engine.py:277`` (the copy of ``in_copy & ~stop`` that pops and emits forced
    1: after the error the lines drained are emitted with a stale previous line)."""
    from sw_model.training import snap_slot_addr
    tb = await fresh(dut, f"snapshot_stops/off{off}", [(0, 16, 16, 0.0)])
    payload = tb.rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    src = tb.stage(bytes(off) + payload) + off
    n_lines = 20
    pattern = bytes([0xA5, 0x5A, 0xC3, 0x3C]) * (n_lines * LINE // 4)
    slots = [snap_slot_addr(tb.cfg, k) for k in (0, 1)]
    for a in slots:
        tb.poke(a, pattern)
    src_line = src - src % LINE
    tb.pmem.add_fault(op="read", lo=src_line + 8 * LINE, hi=src_line + 9 * LINE, count=1,
                      name="source line 8")
    await snapshot_that_fails(tb, src, len(payload))
    full = bytearray(pattern)                  # a complete copy's lines, header aside
    full[LINE:LINE + len(payload)] = payload
    for k, a in enumerate(slots):
        got = tb.mem.read(a, n_lines * LINE)
        for j in range(n_lines):
            line = got[j * LINE:(j + 1) * LINE]
            ok = {pattern[j * LINE:(j + 1) * LINE]}
            if j:
                ok.add(bytes(full[j * LINE:(j + 1) * LINE]))
            assert line in ok, tb.where(
                f"slot {k} line {j} after the failed copy is neither the pattern nor the "
                f"copy's line: {line.hex()}")


@cocotb.test()
async def media_snapshot_copy_beside_failing_writes_of_other_requesters(dut):
    """A SNAPSHOT of 64 KiB and, in the same doorbell, four LOOKUPs (no LOG) whose output
    writes all answer SLVERR: the LOOKUPs complete with MEDIA while the background copy runs;
    the device's port hands every write response's payload (its error flag included) to all
    requesters and raises ``valid`` only at the owner's, so the copy sees the other
    requesters' error responses and must ignore them. The copy completes: MLP_SLOT 1 or 2,
    MLP_EPOCH 1, the slot's payload equals the source. Written for mutant 18 of
    ``hw/snapshot/engine.py:240`` (``valid`` inverted in the write-error term of the copy of
    the stop test that gates the realigner's line counter and previous line: a source line
    popped in the cycle of another requester's error response was not counted)."""
    from cosim.device_driver import DeviceDriver
    from sw_model.training import snap_slot_addr
    tb = await fresh(dut, "snapshot_beside_failing_writes", [(0, 32, 16, 0.0)])
    payload = tb.rng.integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes()
    src = tb.stage(payload)
    outs = [tb.out_area(2 * 64) for _ in range(4)]
    descs = [DeviceDriver.snapshot_desc(1, src, len(payload), 1)]
    for k, out in enumerate(outs):
        oa, ia = staged_bags(tb, [0, 2, 3], [4, 7, 9])
        descs.append(lookup(0, 2, oa, ia, out, log=False, tag=2 + k))
        tb.pmem.add_fault(op="write", lo=out, hi=out + 2 * 64, name=f"LOOKUP {k} output")
    cpls, faults = await submit(tb, descs, "SNAPSHOT, four LOOKUPs")
    assert len(faults) == 8, tb.where(f"faults {faults}")
    expect_status(tb, cpls[0], E.OK, "SNAPSHOT (completed before its copy)")
    for k, c in enumerate(cpls[1:]):
        expect_status(tb, c, E.MEDIA, f"LOOKUP {k} with its output writes failing")
    assert await tb.drv.read("STATUS") & tb.drv.STATUS_SNAP_BUSY, \
        tb.where("the copy ended before the LOOKUPs: the case is not reached")
    tb.pmem.clear_faults()
    await tb.drv.wait_snapshot_idle(timeout=50_000)   # (it ends about 450 cycles later)
    got = await tb.drv.read("MLP_SLOT")
    assert got in (1, 2) and await tb.drv.read64("MLP_EPOCH") == 1, tb.where(f"MLP_SLOT {got}")
    assert tb.mem.read(snap_slot_addr(tb.cfg, got - 1) + LINE, len(payload)) == payload, \
        tb.where("the slot's payload differs from the source")


# ---------------------------------------------------------------------------- 9. host read
@cocotb.test()
async def media_host_read_poisoned(dut):
    """A host MemRd (SnpCur) of a table line whose media read fails: MemData with poison 1;
    the next read of the line (fault gone) is clean and holds the generated bytes."""
    tb = await fresh(dut, "host_read", [(0, 16, 16, 0.0)])
    a = row_addr(tb, 0, 3)
    tb.pmem.add_fault(op="read", lo=a, hi=a + LINE, count=1, name="host line")
    host = tb.drv.host
    t = await host.read(a // LINE, "cur", wait=False)
    await host.wait_txn(t)
    assert len(tb.pmem.faults) == 1
    assert int(t.drs["poison"]) == 1, tb.where(f"MemData without poison: {t.drs}")
    t = await host.read(a // LINE, "cur", wait=False)
    await host.wait_txn(t)
    assert int(t.drs["poison"]) == 0 and bytes(t.drs_data) == tb.mem.read(a, LINE)
    assert bytes(t.drs_data) == tb.model.mem.read(a, LINE)


# ---------------------------------------------------------------------------- 10. poison
@cocotb.test()
async def media_poison_survives_power_failure(dut):
    """A host MemWr with poison to a table row's line (row = one line, dim 16), acknowledged;
    the power fails (cosim.powerfail) and the device restarts on the crash image and recovers:
    the line is still poisoned in the image; a host MemRd of it returns MemData poison 1; a
    LOOKUP reading the row completes with MEDIA (docs/coherence.md "Poison", device reads
    ``err``), one not reading it is OK and equals the model. A partial clean MemWrPtl leaves
    it poisoned; a full-line clean MemWr clears it: the host reads the written bytes without
    poison and the LOOKUP of the row equals the model."""
    tb = await fresh(dut, "poison", [(0, 16, 16, 0.0)])
    cfg = tb.cfg
    dirs = dict(tb.tables)
    R = 5
    a = row_addr(tb, 0, R)
    assert a % LINE == 0
    bad = bytes(range(64))

    async def host_read():
        t = await tb.drv.host.read(a // LINE, "cur", wait=False)
        await tb.drv.host.wait_txn(t)
        return int(t.drs["poison"]), bytes(t.drs_data)

    async def host_write(data, **kw):
        t = await tb.drv.host.write(a // LINE, data, wait=False, **kw)
        await tb.drv.host.wait_txn(t)
        tb.model.mem.write(a, data if kw.get("be") is None else bytes(
            data[i] if kw["be"] >> i & 1 else tb.model.mem.read(a + i, 1)[0]
            for i in range(LINE)))

    async def lookups(tag):
        """(LOOKUP of bags reading row R, LOOKUP of bags not reading it) on fresh staging."""
        with_r = lookup(0, 2, *staged_bags(tb, [0, 2, 4], [1, R, 3, 9]), tb.out_area(2 * 64),
                        log=False, tag=tag)
        out = tb.out_area(2 * 64)
        without = lookup(0, 2, *staged_bags(tb, [0, 2, 3], [2, 7, 11]), out, log=False,
                         tag=tag + 1)
        return with_r, without, out

    await host_write(bad, poison=1)
    await tb.pmem.settle()          # (the C++ model: the B handshake's edge evaluated)
    assert tb.mem.is_poisoned(a) and tb.mem.read(a, LINE) == bad
    assert tb.pmem.writes_in_flight == 0
    img = power_fail(tb.pmem, random.Random(tb.seed),
                     staging=(cfg.staging_base, cfg.staging_size))
    assert img.mem.is_poisoned(a) and img.mem.read(a, LINE) == bad
    await tb.power_on(in_reset=lambda: tb.drv.load_image(img))
    await tb.recover()
    await restore_config(tb, dirs)
    assert tb.mem.is_poisoned(a)
    poison, _ = await host_read()
    assert poison == 1, tb.where("a poisoned line read back without poison after recovery")

    with_r, without, out = await lookups(10)
    (c,), _ = await submit(tb, [with_r], "LOOKUP of the poisoned row")
    expect_status(tb, c, E.MEDIA, "LOOKUP reading a poisoned line")
    want = model_run(tb, [without])[0]
    (c,), _ = await submit(tb, [without], "LOOKUP not reading it")
    expect_status(tb, c, E.OK, "LOOKUP not reading the poisoned line")
    assert int(c["rows"]) == int(want["rows"])
    assert tb.mem.read(out, 2 * 64) == tb.model.mem.read(out, 2 * 64)

    await host_write(bytes([0x5A]) * 64, be=(1 << 64) - 1 - (1 << 17))   # MemWrPtl, 63 bytes
    poison, _ = await host_read()
    assert poison == 1, tb.where("a partial clean write cleared the poison")
    good = tb.rng.integers(-2**20, 2**20, 16, dtype=np.int64).astype("<i4").tobytes()
    await host_write(good)
    assert not tb.mem.is_poisoned(a)
    poison, data = await host_read()
    assert (poison, data) == (0, good), tb.where(f"after a clean MemWr: poison {poison}")
    with_r, _, _ = await lookups(20)
    want = model_run(tb, [with_r])[0]
    (c,), _ = await submit(tb, [with_r], "LOOKUP of the cleaned row")
    expect_status(tb, c, E.OK, "LOOKUP of the row after the clean write")
    assert int(c["rows"]) == int(want["rows"])
    out_r = int(unpack_fields(DESC_FIELDS, with_r)["data_addr"])
    assert tb.mem.read(out_r, 2 * 64) == tb.model.mem.read(out_r, 2 * 64)


# ---- pytest launcher ----------------------------------------------------------------------------
MIN_TESTS = 6 + 3 + 8 + 1 + 1 + 4 + 3 + 3 + 1 + 1 + 3 + 2 + 1 + 1 + 1


@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_media_cosim(device_build, seed, tmp_path):
    """All media-fault cocotb tests pass on the device top."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
