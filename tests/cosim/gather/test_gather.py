"""cocotb tests of LOOKUP (gather + sum-pool) against the golden model; see cosim.tb.gather.

One launch per build (one Verilator build per configuration). Every test
compares the completion and the whole memory image with the golden model.

Pytest launcher (end of file): LOOKUP cosim tier: the gather-reduce device under Verilator against the golden model.

Two hardware configurations, one Verilator build each: the default build (512-bit media port)
and a small one (128-bit port = 4-beat bursts, 16 outstanding reads, 36-bit accumulator so the
BAG_TOO_LONG path is reachable with a 17-row bag).
"""
from dataclasses import replace

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.tb.gather import GatherTB
from hw.config import DeviceConfig
from hw.encodings import LookupErrorCode as E
from hw.testtops.lookup_slice import SLICE_NAME, LookupSlice
from sw_model.memory import LineSnapshot, differing_lines


@cocotb.test()
@cocotb.parametrize(dim=[16, 32, 64, 128])
async def lookup_matches_model_for_each_dim(dut, dim):
    """Uniform bag lengths 0..16 (empty bags included), Zipf indices, every supported dim."""
    tb = GatherTB(dut)
    await tb.reset()
    job = tb.random_job(rows=300, dim=dim, n_bags=40, pooling=8, alpha=1.05, tag=dim)
    await tb.check(job.cmd, E.OK)


@cocotb.test()
async def lookup_directed_edge_cases(dut):
    """Empty bags only, a bag of 128 and of 300 rows, duplicates, the last row, n_bags = 0."""
    tb = GatherTB(dut)
    await tb.reset()
    rng = np.random.default_rng(tb.seed)
    rows, dim = 64, 32
    table = rng.integers(-2**28, 2**28, size=(rows, dim), dtype=np.int64).astype(np.int32)
    cases = {
        "only empty bags": ([0, 0, 0, 0], []),
        "bag of 128": ([0, 128], rng.integers(0, rows, 128)),
        "bag of 300": ([0, 300], rng.integers(0, rows, 300)),
        "duplicates": ([0, 5, 9], [7, 7, 7, 7, 7, 3, 3, 63, 3]),
        "last row": ([0, 1, 3], [rows - 1, rows - 1, 0]),
        "offsets[0] != 0": ([3, 5, 5, 8], [60, 61, 1, 2, 3, 4, 5, 6, 7, 8]),
        "index list starts at word 13 of a line": ([13, 15, 19], list(range(19))),
        "no bags": ([0], []),
    }
    for i, (name, (offsets, indices)) in enumerate(cases.items()):
        dut._log.info(f"case: {name}")
        offsets = np.array(offsets, np.uint32)
        job = tb.job(table, offsets, np.array(indices, np.uint32), tag=i)
        longest = int(np.diff(offsets.astype(np.int64)).max(initial=0))
        await tb.check(job.cmd, E.OK if longest <= tb.cfg.max_bag else E.BAG_TOO_LONG)


@cocotb.test()
async def lookup_offsets_start_mid_line(dut):
    """The offsets list may start at any 4-byte word of a line (here words 0..15 in turn)."""
    tb = GatherTB(dut)
    await tb.reset()
    rng = np.random.default_rng(tb.seed)
    table = rng.integers(-2**20, 2**20, size=(40, 16)).astype(np.int32)
    for w in range(16):
        # junk words in front of the real offsets; the command points past them
        offsets = np.concatenate([np.full(w, 0xFFFF_FFF0, np.uint32),
                                  np.array([0, 3, 3, 7], np.uint32)])
        job = tb.job(table, offsets, rng.integers(0, 40, 7).astype(np.uint32), tag=w)
        cmd = replace(job.cmd, offsets_addr=job.cmd.offsets_addr + 4 * w, n_bags=3)
        await tb.check(cmd, E.OK)


@cocotb.test()
async def lookup_saturates_on_both_rails(dut):
    """Rows near +/-2^31 summed: lanes saturate to the rails and are counted."""
    tb = GatherTB(dut)
    await tb.reset()
    rows, dim = 8, 16
    table = np.zeros((rows, dim), np.int64)
    table[0], table[1] = 2**31 - 1, -2**31
    table[2, ::2], table[2, 1::2] = 2**30, -2**30
    # bags: 2x max, 2x min, 3x row 2, max+min, and single rows exactly on each rail (no
    # saturation may be counted for those)
    offsets = np.array([0, 2, 4, 7, 9, 10, 11], np.uint32)
    indices = np.array([0, 0, 1, 1, 2, 2, 2, 0, 1, 0, 1], np.uint32)
    job = tb.job(table.astype(np.int32), offsets, indices)
    cpl = await tb.check(job.cmd, E.OK)
    assert cpl.sat > 0, "saturation counter did not move"


def _err_cases(tb):
    """(name, LookupCmd, expected code): each check of docs/lookup.md, on valid memory."""
    cfg = tb.cfg
    rng = np.random.default_rng(tb.seed)
    rows, dim = 50, 16
    table = rng.integers(-1000, 1000, size=(rows, dim)).astype(np.int32)
    good = tb.job(table, np.array([0, 2, 4, 6], np.uint32),
                  np.array([1, 2, 3, 4, 5, 6], np.uint32)).cmd
    s_end = cfg.staging_base + cfg.staging_size
    t_end = cfg.table_base + cfg.table_size

    def c(**kw):
        return replace(good, **kw)

    bad_idx = tb.job(table, np.array([0, 2, 4, 6], np.uint32),
                     np.array([1, 2, 3, rows, 5, 6], np.uint32)).cmd
    bad_ord = tb.job(table, np.array([0, 2, 1, 6], np.uint32),
                     np.array([1, 2, 3, 4, 5, 6], np.uint32)).cmd
    long_bag = cfg.max_bag + 1
    too_long = tb.job(table, np.array([0, 1, 1 + long_bag], np.uint32),
                      np.zeros(1 + long_bag, np.uint32)).cmd if long_bag <= 4096 else None
    # indices whose range runs past the staging end: indices_addr near the end, big offsets
    tail = s_end - 64
    past_end = c(indices_addr=tail, n_bags=3)
    # the same near 4 * 2^32 bytes past the end: the reported value (indices_addr + 4*e) has
    # bits above 2^34 set (a mutant flipping a low bit of the value by bit 34 survived)
    far = tb.job(table, np.array([0xFFFF_FF00, 0xFFFF_FF10], np.uint32),
                 np.zeros(0, np.uint32)).cmd
    far_past_end = replace(far, indices_addr=tail)
    cases = [
        ("bad dim", c(dim=48), E.BAD_DIM),
        ("dim 0", c(dim=0), E.BAD_DIM),
        ("table misaligned", c(table_base=good.table_base + 4), E.ALIGN),
        ("out misaligned", c(out_addr=good.out_addr + 32), E.ALIGN),
        ("offsets misaligned", c(offsets_addr=good.offsets_addr + 2), E.ALIGN),
        ("indices misaligned", c(indices_addr=good.indices_addr + 1), E.ALIGN),
        ("table past region", c(table_rows=(t_end - good.table_base) // 64 + 1), E.ADDR_RANGE),
        ("table in staging", c(table_base=cfg.staging_base), E.ADDR_RANGE),
        ("offsets outside staging", c(offsets_addr=cfg.table_base), E.ADDR_RANGE),
        ("out past staging", c(out_addr=s_end - 64, n_bags=2), E.ADDR_RANGE),
        ("indices outside staging", c(indices_addr=cfg.table_base), E.ADDR_RANGE),
        ("indices run past staging", past_end, None),
        ("indices end 16 GiB past staging", far_past_end, E.ADDR_RANGE),
        ("index out of range", bad_idx, E.INDEX_RANGE),
        ("index = rows on row 0 table", c(table_rows=0), E.INDEX_RANGE),
        ("offsets decrease", bad_ord, E.OFFSETS_ORDER),
    ]
    if too_long is not None:
        cases.append(("bag too long", too_long, E.BAG_TOO_LONG))
    return cases, good


@cocotb.test()
async def lookup_errors_report_and_write_nothing_wrong(dut):
    """Every documented error: code, bag and value as the model says; memory as the model says
    (earlier bags written, nothing else); the next good command still works."""
    tb = GatherTB(dut)
    await tb.reset()
    cases, good = _err_cases(tb)
    for i, (name, cmd, code) in enumerate(cases):
        dut._log.info(f"error case: {name}")
        await tb.check(cmd, code)
        await tb.check(good, E.OK)


@cocotb.test()
@cocotb.parametrize(stall=[0.0, 0.3], latency=[1, 37])
async def lookup_random_with_stalls(dut, stall, latency):
    """Random jobs (dims, pooling, skew, saturation) with random stalls on every AXI channel and
    on the command/completion streams, back to back, errors interleaved."""
    tb = GatherTB(dut, latency=latency, stall=stall)
    await tb.reset()
    for i in range(6):
        dim = tb.rng.choice([16, 32, 64, 128])
        job = tb.random_job(rows=tb.rng.randint(1, 400), dim=dim, n_bags=tb.rng.randint(0, 30),
                            pooling=tb.rng.choice([1, 3, 8, 20]), alpha=tb.rng.random() * 1.2,
                            extreme=tb.rng.choice([0.0, 0.3]), tag=i)
        cmd = job.cmd
        if tb.rng.random() < 0.3 and cmd.n_bags:
            cmd = replace(cmd, table_rows=max(0, cmd.table_rows - 5))
        await tb.check(cmd)


@cocotb.test()
async def busy_rises_for_each_command_and_falls_after_its_completion(dut):
    """``busy`` is high while a command runs and low again within 64 cycles of its completion
    (one command at a time). Nothing else reads the port: a mutant holding it high survived
    the LOOKUP benches (docs/verification.md "Mutation testing: hw")."""
    tb = GatherTB(dut)
    await tb.reset()
    trace = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            trace.append(int(dut.busy.value))
    cocotb.start_soon(watch())
    for i in range(3):
        start = len(trace)
        job = tb.random_job(rows=100, dim=32, n_bags=6, pooling=4, tag=i)
        await tb.check(job.cmd, E.OK)
        assert 1 in trace[start:], f"busy never rose for command {i} (seed {tb.seed})"
        for _ in range(64):
            await RisingEdge(dut.clk)
            if not trace[-1]:
                break
        assert trace[-1] == 0, f"busy still high after command {i} completed (seed {tb.seed})"


@cocotb.test()
async def lookup_check_marker_wins_over_the_index_word_behind_it(dut):
    """A bag failing check 4 or 5 right after a bag that ends inside an index line: the next
    word of that line (fetched with the line, here >= table_rows) is not an index of any bag,
    so the completion is the offsets check's (code, bag, value), never INDEX_RANGE. A mutant
    that loaded the error marker as a bag reported INDEX_RANGE."""
    tb = GatherTB(dut)
    await tb.reset()
    rng = np.random.default_rng(tb.seed)
    table = rng.integers(-1000, 1000, size=(20, 16)).astype(np.int32)
    junk = 0xFFFF_FFFF
    long_end = 3 + tb.cfg.max_bag + 1
    for i, (name, offsets, code) in enumerate([
            ("offsets decrease", [0, 3, 1], E.OFFSETS_ORDER),
            ("bag too long", [0, 3, long_end], E.BAG_TOO_LONG)]):
        dut._log.info(f"case: {name}")
        job = tb.job(table, np.array(offsets, np.uint32),
                     np.array([4, 5, 6, junk, junk], np.uint32), tag=i)
        await tb.check(job.cmd, code)


@cocotb.test()
async def lookup_reads_no_index_line_past_its_last_bag(dut):
    """``n_bags`` = 70 (bit 6 set): the walker stops after bag 69 although the offsets line
    goes on with words that would open a long valid bag; every media read past the last index
    line of the command faults, and none may happen (result as the model, no fault injected).
    A mutant whose walker missed its last bag validated those words, and the index reader
    prefetched past the list."""
    tb = GatherTB(dut)
    await tb.reset()
    cfg = tb.cfg
    rng = np.random.default_rng(tb.seed)
    n_bags, rows, dim = 70, 64, 16
    table = rng.integers(-1000, 1000, size=(rows, dim)).astype(np.int32)
    lens = rng.integers(6, 10, n_bags)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    end = int(offsets[-1])
    trap = end + min(cfg.max_bag, 1000)          # a valid bag: length <= max_bag
    words = np.concatenate([offsets, np.full(16, trap, np.uint32)])   # rest of the line
    job = tb.job(table, words, rng.integers(0, rows, end).astype(np.uint32))
    cmd = replace(job.cmd, n_bags=n_bags)       # the trap words are not offsets of the command
    first_past = -(-(cmd.indices_addr + 4 * end) // 64) * 64
    tb.pmem.add_fault(op="read", lo=first_past, hi=cmd.indices_addr + 4 * trap + 64,
                      name="index lines past the list")
    dut._log.info(f"seed {tb.seed}: index list ends at {cmd.indices_addr + 4 * end:#x}, reads "
                  f"from {first_past:#x} fault")
    try:
        await tb.check(cmd, E.OK)
    finally:
        tb.pmem.clear_faults()
    assert not tb.pmem.faults, (f"index lines past the list were read: {tb.pmem.faults[:4]} "
                                f"(seed {tb.seed})")


@cocotb.test()
async def lookup_many_empty_bags(dut):
    """16512 empty bags (n_bags bits 14 and 7 set, above every other test's counts): every
    output line written with zeros, ``out_lines`` = n_bags, as the model. A mutant that
    compared the bag count with bit 7 flipped by bit 14 completed 128 bags early."""
    tb = GatherTB(dut)
    await tb.reset()
    n_bags = (1 << 14) + (1 << 7)
    table = np.ones((4, 16), np.int32)
    job = tb.job(table, np.zeros(n_bags + 1, np.uint32), np.zeros(0, np.uint32))
    got = await tb.check(job.cmd, E.OK)
    assert got.out_lines == n_bags


@cocotb.test()
@cocotb.parametrize(where=["offsets", "indices", "row", "out_write"])
async def lookup_media_error_completes_with_media(dut, where):
    """One access of a LOOKUP answers SLVERR (offsets read, index read, row read, output write;
    reads return zeros): the completion is MEDIA with ``err_bag`` = ``err_value`` = 0 and the
    command's tag, the fault was injected, nothing outside the output buffer changed; the same
    command without the fault then equals the model. Media errors were tested only on the
    full device, whose engines are not mutated."""
    tb = GatherTB(dut)
    await tb.reset()
    rng = np.random.default_rng(tb.seed)
    rows, dim = 40, 32
    table = rng.integers(-1000, 1000, size=(rows, dim)).astype(np.int32)
    offsets = np.array([0, 3, 3, 7], np.uint32)
    indices = np.array([5, 9, 5, 1, 2, 3, 9], np.uint32)
    job = tb.job(table, offsets, indices, tag=7)
    cmd = job.cmd
    out_bytes = cmd.n_bags * dim * 4
    row9 = cmd.table_base + 9 * dim * 4
    lo, hi, op = {"offsets": (cmd.offsets_addr, cmd.offsets_addr + 4, "read"),
                  "indices": (cmd.indices_addr, cmd.indices_addr + 4, "read"),
                  "row": (row9, row9 + 64, "read"),
                  "out_write": (cmd.out_addr, cmd.out_addr + out_bytes, "write")}[where]
    tb.pmem.add_fault(op=op, lo=lo, hi=hi, data="zeros", name=where)
    n_faults = len(tb.pmem.faults)
    before = LineSnapshot.of(tb.mem)
    try:
        got = await tb.run_rtl(cmd)
    finally:
        tb.pmem.clear_faults()
    assert len(tb.pmem.faults) > n_faults, f"no fault injected ({where}, seed {tb.seed})"
    assert (got.tag, got.err_code, got.err_bag, got.err_value) == (7, E.MEDIA, 0, 0), \
        f"{where} fault: {got} (seed {tb.seed})"
    changed = differing_lines(before, tb.mem, skip=(cmd.out_addr, cmd.out_addr + out_bytes))
    assert not changed, f"{where} fault: lines outside the output changed: {changed[:4]}"
    await tb.check(cmd, E.OK)


@cocotb.test()
async def lookup_cycles_counts_from_accept_to_completion(dut):
    """``cycles`` of the completion is the number of clock cycles from the command's accept to
    its completion's valid (docs/architecture.md "Counters in the completion"), measured here at
    the ports: for a command failing a command-level check, a short and a long LOOKUP and one
    failing a bag check. The comparisons with the model skip ``cycles``."""
    tb = GatherTB(dut)
    await tb.reset()
    edges = {"cmd": [], "cpl": []}

    async def watch():
        n, cpl_was = 0, 0
        while True:
            await RisingEdge(dut.clk)
            n += 1
            if dut.cmd__valid.value and dut.cmd__ready.value:
                edges["cmd"].append(n)
            cpl_now = int(dut.cpl__valid.value)
            if cpl_now and not cpl_was:
                edges["cpl"].append(n)
            cpl_was = cpl_now
    cocotb.start_soon(watch())
    rng = np.random.default_rng(tb.seed)
    table = rng.integers(-1000, 1000, size=(50, 16)).astype(np.int32)
    short = tb.job(table, np.array([0, 2, 4], np.uint32),
                   np.array([1, 2, 3, 4], np.uint32), tag=1).cmd
    cmds = [replace(short, dim=48, tag=0), short,
            tb.random_job(rows=200, dim=64, n_bags=30, pooling=8, tag=2).cmd,
            tb.job(table, np.array([0, 2, 1], np.uint32),
                   np.array([1, 2, 3], np.uint32), tag=3).cmd]
    for i, cmd in enumerate(cmds):
        got = await tb.check(cmd)
        measured = edges["cpl"][i] - edges["cmd"][i]
        dut._log.info(f"tag {cmd.tag}: cycles {got.cycles}, accept -> valid {measured}")
        assert got.cycles == measured, (f"tag {cmd.tag}: cycles {got.cycles}, but {measured} "
                                        f"cycles from accept to completion (seed {tb.seed})")


# ---- pytest launcher ----------------------------------------------------------------------------
CONFIGS = {
    "default": DeviceConfig(),
    "narrow": DeviceConfig(media_data_bits=128, max_reads=16, max_writes=4, acc_bits=36,
                           table_base=0x4000_0000, table_size=1 << 26,
                           staging_base=0x1000_0000, staging_size=1 << 24),
}


@pytest.fixture(scope="session", params=sorted(CONFIGS))
def device_build(request):
    cfg = CONFIGS[request.param]
    return cfg, cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)


@pytest.mark.cosim
def test_lookup_cosim(device_build, seed, tmp_path):
    """All LOOKUP cocotb tests pass (completion + whole memory image equal to the model)."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg))
    assert res.n_ran >= 8 and res.n_failed == 0
