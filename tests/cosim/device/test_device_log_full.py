"""cocotb tests of the full device top with a 136-slot undo log, against the golden model.

The ``LOG_FULL`` completions of docs/training.md section 5 (a LOOKUP+LOG that meets a row it
cannot log, the UPDATE that follows stopping before its first row it cannot log, an UPDATE
that fills the log on its synchronous path) on a 4-entry command ring (filled, appended to
while busy, wrapped). Every completion (all fields but ``cycles``), the whole memory image and
the error/ring CSRs equal ``sw_model.training.TrainingDevice`` (cosim.tb.device); the statuses
the contract gives are asserted as well, so the run hits what it is meant to.

Pytest launcher (end of file): the ``fpga-ecp5`` configuration with ``log_size`` =
``trainingcxl.crash.campaign.EXTENDED_LOG_SIZE`` (136 slots), the Verilator build that
``make crash-extended`` runs with Python-clocked models (shared through the content-hash
cache), one simulator run.
"""
import cocotb
import numpy as np
import pytest

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.tb.device import E, K, DeviceTB, commit, lookup, lr_q, setup_tables, update

RING = 4


def distinct_bags(tb, n_bags, per_bag, rows):
    """``n_bags`` bags of ``per_bag`` rows each, all rows distinct (offsets, indices)."""
    idx = tb.rng.choice(rows, size=n_bags * per_bag, replace=False).astype(np.uint32)
    return np.arange(0, n_bags * per_bag + 1, per_bag, dtype=np.uint32), idx


def grads(tb, n_bags, dim):
    return tb.stage_i32(tb.rng.integers(-2**26, 2**26, (n_bags, dim)))


def expect(tb, cpl, status, what):
    """The contract's status (the model's is compared by ``tb.run``/``tb.finish``)."""
    got = int(cpl["status"])
    assert got == status, tb.where(f"{what}: status {E(got).name}, contract {E(status).name}")


@cocotb.test()
async def device_log_full_on_a_small_ring(dut):
    """Batch 1: a LOOKUP+LOG of 160 distinct rows (dim 128) completes with LOG_FULL
    (``err_value`` = log slots), and while it runs UPDATE + COMMIT are appended to the ring
    (3 of 4 entries outstanding: full); the UPDATE of the same rows applies the logged ones and
    stops with LOG_FULL at the first one the log cannot hold; the COMMIT commits what was
    applied. Batch 2: an UPDATE of 150 distinct rows (dim 16) fills the log on its synchronous
    path (LOG_FULL), then reset + RECOVER rolls it back to batch 1. Batches 2 and 3 then
    commit normally (the log was retired). The ring wraps twice."""
    tb = DeviceTB(dut, latency=20, stall=0.05, name="log_full")
    cfg = tb.cfg
    slots = cfg.log_slots
    assert slots < 160, f"log of {slots} slots: the test needs a small one"
    await tb.power_on()
    await tb.recover()
    specs = [(0, 512, 128, 0.0), (1, 400, 16, 0.0)]
    await setup_tables(tb, specs)
    await tb.set_lr(lr_q(tb, 0.125))
    await tb.configure_ring(RING)
    _, rows0, dim0 = tb.tables[0]
    _, rows1, dim1 = tb.tables[1]

    # batch 1: LOOKUP alone, then UPDATE + COMMIT appended while it runs
    o, i = distinct_bags(tb, 10, 16, rows0)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    await tb.ring_raw([lookup(0, 10, oa, ia, tb.out_area(10 * dim0 * 4), batch=1, tag=1)])
    await tb.ring_raw([update(0, 10, oa, ia, grads(tb, 10, dim0), batch=1, tag=2),
                       commit(1, tag=3)])
    head = await tb.drv.read("CMD_HEAD")
    assert head == 0, tb.where(f"CMD_HEAD {head}: the LOOKUP finished before the second "
                               "doorbell, the ring was never full")
    look, upd, com = await tb.finish("batch 1")
    await tb.check("after batch 1")
    expect(tb, look, E.LOG_FULL, "LOOKUP of more rows than log slots")
    assert int(look["err_value"]) == slots and int(look["log_records"]) == slots, tb.where(
        f"LOOKUP err_value {int(look['err_value'])} log_records {int(look['log_records'])}")
    expect(tb, upd, E.LOG_FULL, "UPDATE of rows the LOOKUP could not log")
    assert 0 < int(upd["rows"]) < 160, tb.where(f"UPDATE applied {int(upd['rows'])} rows")
    expect(tb, com, E.OK, "COMMIT after LOG_FULL")
    assert tb.model.committed == 1
    committed = {t: tb.table_bytes(t) for t in (0, 1)}

    # batch 2: the synchronous path fills the log; slots 3, 0 (the ring wraps)
    o, i = distinct_bags(tb, 6, 25, rows1)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    o2, i2 = distinct_bags(tb, 2, 4, rows1)
    upd, look = await tb.run(
        [update(1, 6, oa, ia, grads(tb, 6, dim1), batch=2, tag=4),
         lookup(1, 2, tb.stage_u32(o2), tb.stage_u32(i2), tb.out_area(2 * dim1 * 4), batch=2,
                tag=5)], "batch 2")
    await tb.check("after batch 2")
    expect(tb, upd, E.LOG_FULL, "UPDATE of more rows than log slots")
    assert int(upd["log_records"]) == slots and int(upd["rows"]) == slots, tb.where(
        f"UPDATE log_records {int(upd['log_records'])} rows {int(upd['rows'])}")
    assert tb.table_bytes(1) != committed[1], tb.where("batch 2 changed nothing")
    await tb.power_on()
    await tb.recover()
    await tb.check("after the abort of batch 2")
    assert tb.model.recovered_records == slots, tb.where(
        f"recovered {tb.model.recovered_records} records")
    for t in (0, 1):
        assert tb.table_bytes_at(specs, t) == committed[t], tb.where(f"table {t} not rolled "
                                                                     "back to batch 1")

    # batch 2 again after the rollback (the log is empty again), then batch 3
    for tid, rows, dim, _ in specs:
        await tb.set_table(tid, tb.bases[tid], rows, dim)
    await tb.set_lr(lr_q(tb, 0.125))
    await tb.configure_ring(RING)
    o, i = distinct_bags(tb, 3, 5, rows1)
    oa, ia = tb.stage_u32(o), tb.stage_u32(i)
    got = await tb.run([lookup(1, 3, oa, ia, tb.out_area(3 * dim1 * 4), batch=2, tag=6),
                        update(1, 3, oa, ia, grads(tb, 3, dim1), batch=2, tag=7),
                        commit(2, tag=8)], "batch 2 again, ring full")
    got += await tb.run([lookup(1, 3, oa, ia, tb.out_area(3 * dim1 * 4), batch=3, tag=9),
                         commit(3, tag=10)], "batch 3, ring wrapped")
    for c in got:
        expect(tb, c, E.OK, f"{K(int(c['kind'])).name} tag {int(c['tag'])} after the rollback")
    await tb.check("after batches 2 and 3")
    assert tb.model.committed == 3


# ---- pytest launcher ----------------------------------------------------------------------------
MIN_TESTS = 1


@pytest.fixture(scope="module")
def log_full_build():
    from hw.config import CONFIGS
    from trainingcxl.crash.campaign import EXTENDED_LOG_SIZE
    cfg = CONFIGS["fpga-ecp5"].with_(log_size=EXTENDED_LOG_SIZE)
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_device_log_full_cosim(log_full_build, seed, tmp_path):
    """LOG_FULL on a 136-slot log and a 4-entry ring: completions, memory and CSRs equal to
    the model."""
    cfg, b = log_full_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
