"""cocotb bench for tests/cosim/test_trace_compare.py: one small full-device run, recorded.

Recording is switched on by the environment (``TCXL_TRACE=path``, the hook in
``cosim.tb_device.DeviceTB``), so this also tests that hook. The workload: recover a fresh
device (the superblock is formatted), two tables, one training batch (LOOKUP+LOG x2, UPDATE x2
with one synchronous-logging path, COMMIT) in one doorbell, a second batch split over two
doorbells, host CXL.mem reads of table rows, the superblock and the undo log (refused: MemData-NXM), an unmapped CSR read and a
read-only CSR write. The bench also checks everything against its own model as usual
(``DeviceTB.run``/``check``).
"""
import cocotb
import numpy as np

from cosim.tb_device import E, DeviceTB, commit, lookup, update

LINE = 64


def _bags(rng, n_bags, max_len, rows):
    lens = rng.integers(0, max_len + 1, n_bags)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    return offsets, rng.integers(0, rows, int(offsets[-1])).astype(np.uint32)


def _batch(tb, b, tag):
    rng = tb.rng
    looks, upds = [], []
    for tid in sorted(tb.tables):
        _, rows, dim = tb.tables[tid]
        o, i = _bags(rng, 3, 3, rows)
        oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        looks.append(lookup(tid, 3, oa, ia, tb.out_area(3 * dim * 4), batch=b, tag=tag))
        if tid == 1:       # own bags: rows the LOOKUP did not log are logged by the UPDATE
            o, i = _bags(rng, 3, 3, rows)
            oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        g = (rng.standard_normal((3, dim)) * (1 << tb.cfg.frac_bits)).astype(np.int32)
        upds.append(update(tid, 3, oa, ia, tb.stage_i32(g), batch=b, tag=tag + 10))
        tag += 1
    return looks + upds + [commit(b, tag=tag + 20)]


@cocotb.test()
async def traced_training_run(dut):
    tb = DeviceTB(dut, latency=8, name="trace_compare")
    assert tb.trace is not None, "TCXL_TRACE is not set: nothing recorded"
    # a fresh device: recovery formats the superblock (bytes 8..63, then magic/version)
    await tb.power_on()
    await tb.recover()
    for tid, rows, dim in ((0, 24, 16), (1, 12, 32)):
        await tb.set_table(tid, tb.new_table(rows, dim), rows, dim)
    await tb.set_lr(int(0.1 * (1 << tb.cfg.frac_bits)))
    await tb.configure_ring(8)
    await tb.run(_batch(tb, 1, 1), "batch 1")
    descs = _batch(tb, 2, 40)
    await tb.run(descs[:3], "batch 2a")
    await tb.run(descs[3:], "batch 2b")
    await tb.check("after two batches")
    # host reads: table rows, the superblock (uncached read allowed), the log (refused)
    cfg = tb.cfg
    base0 = tb.tables[0][0]
    addrs = [base0, base0 + 5 * LINE, cfg.superblock_base, cfg.log_base]
    lines = await tb.drv.read_lines(addrs)
    assert lines[0] == tb.model.mem.read(base0, LINE), tb.where("host read of row 0")
    assert lines[2] == tb.model.mem.read(cfg.superblock_base, LINE), tb.where("superblock")
    await tb.csr_bad_read(0xFFC)
    await tb.csr_bad_write(tb.map.offset("ERR_COUNT"), E.CSR_RO)
    await tb.check("after misuse")
    tb.trace.write()
