"""Bench helpers for media-fault runs on the full device (:class:`cosim.tb.device.DeviceTB`):
the campaign (:mod:`trainingcxl.faults.tb`, ``trainingcxl faults``) and the case-by-case tests
(tests/cosim/media). Expected values come from the golden model
(:class:`sw_model.training.TrainingDevice`) or the bytes the bench generated, never from the RTL.
"""
import numpy as np

from cosim.tb.device import E, DeviceTB, bags, commit, lookup, lr_q, setup_tables, update
from hw.encodings import LOG_HDR_FIELDS, LOG_MAGIC, SB_FIELDS, unpack_fields
from sw_model.training import TrainingDevice, record_crc, slot_addr

RING = 16
LINE = 64


def row_addr(tb, tid, row):
    base, _, dim = tb.tables[tid]
    return base + row * dim * 4


def row_lines(tb, tid, row, k=None):
    """[lo, hi) of line ``k`` of a row (or of the whole row)."""
    a = row_addr(tb, tid, row)
    dim = tb.tables[tid][2]
    return (a, a + dim * 4) if k is None else (a + LINE * k, a + LINE * (k + 1))


def log_records(tb, n_slots=512):
    """Current records (magic, open batch, superblock epoch) among the first ``n_slots`` slots
    of the RTL's log, each with ``valid`` = its CRC matches (what recovery would apply). Slots
    that are not current are skipped, not taken as the end (a record write may have failed)."""
    cfg, mem = tb.cfg, tb.mem
    sb = unpack_fields(SB_FIELDS, mem.read(cfg.superblock_base, LINE))
    out = []
    for s in range(min(n_slots, cfg.log_slots)):
        a = slot_addr(cfg, s)
        line = mem.read(a, LINE)
        h = unpack_fields(LOG_HDR_FIELDS, line)
        if not (h["magic"] == LOG_MAGIC and h["batch"] == sb["committed"] + 1
                and h["epoch"] == sb["recovery_epoch"]):
            continue
        data = mem.read(a + LINE, h["dim"] * 4) if h["dim"] in (16, 32, 64, 128) else b""
        out.append(dict(h, slot=s, data=data, valid=bool(data) and
                        record_crc(data, line) == h["crc"]))
    return out


def check_log_trustworthy(tb, before, what):
    """Every record recovery would apply holds its row's contents at the start of the batch
    (``before``: {table id: bytes of the table}, from the test or the model)."""
    recs = log_records(tb)
    for r in recs:
        if not r["valid"]:
            continue
        tid = r["table"]
        base, _, dim = tb.tables[tid]
        want = before[tid][r["row"] * dim * 4:(r["row"] + 1) * dim * 4]
        if r["data"] != want:
            got_w, want_w = np.frombuffer(r["data"], "<i4"), np.frombuffer(want, "<i4")
            e = int(np.flatnonzero(got_w != want_w)[0])
            raise AssertionError(tb.where(
                f"{what}: log slot {r['slot']} (table {tid} row {r['row']}) has a valid CRC "
                f"but holds {got_w[e:e + 3].tolist()}... from element {e}, the row held "
                f"{want_w[e:e + 3].tolist()}... (untrusted data logged as valid)"))
    return recs


def check_tables(tb, want, what):
    for tid, data in want.items():
        got = tb.table_bytes(tid)
        if got != data:
            dim = tb.tables[tid][2]
            bad = sorted({k // (dim * 4) for k in range(len(data)) if got[k] != data[k]})
            raise AssertionError(tb.where(f"{what}: table {tid} rows {bad[:8]} differ "
                                          f"({len(bad)} rows)"))


def model_tables(tb):
    return {tid: tb.model.mem.read(base, rows * dim * 4)
            for tid, (base, rows, dim) in tb.tables.items()}


async def submit(tb, descs, what):
    """Run ``descs`` on the RTL (one doorbell); returns (completions, faults injected during
    them). A hang fails here (the driver's timeout)."""
    n0 = len(tb.pmem.faults)
    got = await tb.drv.submit(descs, timeout=200_000)
    return got, tb.pmem.faults[n0:]


def model_run(tb, descs):
    """The golden model's completions of ``descs`` run without faults (model state advances)."""
    return [TrainingDevice.parse_cpl(tb.model.execute(d)) for d in descs]


def expect_status(tb, cpl, status, what):
    got = int(cpl["status"])
    assert got == int(status), tb.where(
        f"{what}: status {E(got).name if got in E._value2member_map_ else got}, "
        f"expected {E(status).name}")


async def fresh(dut, name, specs, *, latency=16):
    tb = DeviceTB(dut, latency=latency, name=name)
    await tb.power_on()
    await tb.recover()
    await setup_tables(tb, specs)
    await tb.set_lr(lr_q(tb, 0.125))
    await tb.configure_ring(RING)
    return tb


async def restore_config(tb, tables):
    """Reprogram the directory, LR and ring after a reset (both sides)."""
    for tid, (base, rows, dim) in tables.items():
        await tb.set_table(tid, base, rows, dim)
    await tb.set_lr(lr_q(tb, 0.125))
    await tb.configure_ring(RING)


def staged_bags(tb, offsets, indices):
    return (tb.stage_u32(np.asarray(offsets, np.uint32)),
            tb.stage_u32(np.asarray(indices, np.uint32)))


def grads(tb, n_bags, dim):
    g = tb.rng.standard_normal((n_bags, dim)) * (1 << tb.cfg.frac_bits)
    return tb.stage_i32(np.clip(g, -2**31, 2**31 - 1).astype(np.int32))


def random_batch(tb, batch, tag):
    """LOOKUP+LOG of every table, UPDATE of every table (table 1 with bags of its own, so the
    synchronous path logs), COMMIT; returns (descriptors, [lo, hi) of the batch's staging)."""
    lo = None
    descs, upds = [], []
    for tid in sorted(tb.tables):
        _, rows, dim = tb.tables[tid]
        nb = int(tb.rng.integers(2, 5))
        o, i = bags(tb, nb, 5, rows, hot=max(2, rows // 3))
        oa, ia = staged_bags(tb, o, i)
        lo = oa if lo is None else lo
        descs.append(lookup(tid, nb, oa, ia, tb.out_area(nb * dim * 4), batch=batch, tag=tag))
        if tid == 1:
            oa, ia = staged_bags(tb, *bags(tb, nb, 5, rows))
        upds.append(update(tid, nb, oa, ia, grads(tb, nb, dim), batch=batch, tag=tag + 1))
        tag += 2
    hi = tb.stage(b"\0" * 64)          # (a marker line: everything before it is this batch's)
    return descs + upds + [commit(batch, tag=tag)], (lo, hi)
