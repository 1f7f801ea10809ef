"""GatherReduce with LOG (hw/gather/engine.py tee) feeding an UndoLogger, end to end in pysim:
the log region and the pooled outputs against an independent construction (docs/training.md
section 5, docs/lookup.md), with duplicate rows within and across bags, an empty bag, a LOOKUP
without LOG in between (nothing logged, tee streams idle) and a LOOKUP stopped by INDEX_RANGE
(rows before the error logged, none after)."""
import struct
import zlib

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from hw.config import DeviceConfig
from hw.encodings import LOG_HDR_FIELDS, LOG_MAGIC, LookupErrorCode, pack_fields
from hw.gather import GatherReduce
from hw.port_mux import RequestPortMux
from hw.undolog import UndoLogger

from pysim_util import Stall, make_rng, simulate

CFG = DeviceConfig(max_reads=16, max_writes=16, log_size=576 * 64, log_set_sets=8,
                   log_set_ways=2, log_window=4)
BATCH = 7
EPOCH = 3
TABLE_ID = 5
TABLE_BASE = 0x40_0000
ROWS = 40
STG = CFG.staging_base


def row_words(row, dim, salt=0):
    """int32 contents of table row ``row`` (spread over the whole range, mostly small)."""
    return [((row * 1_000_003 + e * 7919 + salt) % 200_001) - 100_000 for e in range(dim)]


class Memory:
    """Byte-addressed behavioural memory behind the shared request port: reads answered per id in
    request order with random latency (ids interleave freely), writes acknowledged in order with
    random latency, random request stalls."""

    def __init__(self, rng, p_stall=0.25, lat=(1, 10)):
        self.rng, self.lat = rng, lat
        self.mem = {}
        self.rstall, self.wstall = Stall(rng, p_stall), Stall(rng, p_stall)
        self.log_writes = 0

    def write(self, addr, data):
        for i, b in enumerate(data):
            self.mem[addr + i] = b

    def read(self, addr, n):
        return bytes(self.mem.get(addr + i, 0) for i in range(n))

    async def serve(self, ctx, port):
        rq = {}                      # id -> [(release, line)]
        wq = []                      # (release, id)
        t = 0
        while True:
            ctx.set(port.rd_req.ready, 0 if self.rstall() else 1)
            ctx.set(port.wr_req.ready, 0 if self.wstall() else 1)
            ready_ids = [i for i, q in rq.items() if q and q[0][0] <= t]
            rid = self.rng.choice(ready_ids) if ready_ids else None
            if rid is not None:
                line = rq[rid][0][1]
                ctx.set(port.rd_resp.payload, {"id": rid, "err": 0, "data": int.from_bytes(
                    self.read(line * 64, 64), "little")})
            ctx.set(port.rd_resp.valid, rid is not None)
            wh = wq[0] if wq and wq[0][0] <= t else None
            if wh is not None:
                ctx.set(port.wr_resp.payload, {"id": wh[1], "err": 0})
            ctx.set(port.wr_resp.valid, wh is not None)
            *_, qv, qr, qp, rr, wv, wr, wp, br = await ctx.tick().sample(
                port.rd_req.valid, port.rd_req.ready, port.rd_req.payload, port.rd_resp.ready,
                port.wr_req.valid, port.wr_req.ready, port.wr_req.payload, port.wr_resp.ready)
            t += 1
            if rid is not None and rr:
                rq[rid].pop(0)
            if wh is not None and br:
                wq.pop(0)
            if qv and qr:
                q = rq.setdefault(int(qp.id), [])
                q.append((max([t + self.rng.randint(*self.lat)] + [r for r, _ in q[-1:]]),
                          int(qp.addr)))
            if wv and wr:
                data = int(wp.data).to_bytes(64, "little")
                be = int(wp.be)
                for i in range(64):
                    if (be >> i) & 1:
                        self.mem[int(wp.addr) * 64 + i] = data[i]
                self.log_writes += int(wp.id) == 9
                wq.append((max([t + self.rng.randint(*self.lat)] + [r for r, _ in wq[-1:]]),
                           int(wp.id)))


class Expect:
    """Independent construction of the log (docs/training.md 5) for rows in issue order."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.sets = [[] for _ in range(cfg.log_set_sets)]
        self.s = cfg.log_set_sets.bit_length() - 1
        self.records = []

    def row(self, table, row, dim, base, contents):
        h = (row ^ (row >> self.s) ^ table) % self.cfg.log_set_sets
        if (table, row) in self.sets[h]:
            return
        if len(self.sets[h]) < self.cfg.log_set_ways:
            self.sets[h].append((table, row))
        addr = base + row * dim * 4
        data = struct.pack(f"<{dim}i", *contents)
        vals = {"magic": LOG_MAGIC, "table": table, "dim": dim, "batch": BATCH, "row": row,
                "addr": addr, "epoch": EPOCH}
        crc = zlib.crc32(data + pack_fields(LOG_HDR_FIELDS, vals, 64))
        self.records.append(pack_fields(LOG_HDR_FIELDS, dict(vals, crc=crc), 64) + data)


def issue_order(bags, table_rows):
    """Row items the LOOKUP reads (lookup.md order), stopping at the first bad index."""
    out = []
    for bag in bags:
        for x in bag:
            if x >= table_rows:
                return out
            out.append(x)
    return out


def sat32(v):
    return max(-2**31, min(2**31 - 1, v))


def make_cmd(tag, dim, n_bags, off_addr, idx_addr, out_addr):
    return {"tag": tag, "dim": dim, "table_rows": ROWS, "n_bags": n_bags,
            "table_base": TABLE_BASE, "offsets_addr": off_addr, "indices_addr": idx_addr,
            "out_addr": out_addr}


@pytest.mark.parametrize("seed", [1, 2])
def test_lookup_with_log_writes_expected_records(seed):
    """Three LOOKUPs on one table (dim 32) in one batch: (1) LOG, 6 bags with duplicates within
    and across bags and an empty bag; (2) no LOG (nothing logged; ``log_rows``/``log_lines``
    never valid); (3) LOG, rows partly logged already, INDEX_RANGE in bag 2 (rows before it
    logged, none after). The log region equals the expected records (order, bytes, CRC), the
    logger's ``records`` their number, and outputs/completions match the pooled sums."""
    rng = make_rng(seed)
    dim = 32
    mem = Memory(rng)
    contents = {r: row_words(r, dim) for r in range(ROWS)}
    for r, w in contents.items():
        mem.write(TABLE_BASE + r * dim * 4, struct.pack(f"<{dim}i", *w))
    dup = [rng.randrange(ROWS) for _ in range(4)]
    lookups = [
        (1, [[dup[0], dup[1], dup[0]], [], [dup[1], 3, dup[2]], [dup[2]],
             [rng.randrange(ROWS) for _ in range(5)], [dup[0], dup[3], dup[3]]]),
        (0, [[rng.randrange(ROWS) for _ in range(3)] for _ in range(3)]),
        (1, [[dup[1], 31, 32], [dup[3], 33], [34, ROWS + 5, 35], [36]]),
    ]
    cmds, expect_cpl = [], []
    exp = Expect(CFG)
    addr = STG
    for tag, (log, bags) in enumerate(lookups):
        offs = [0]
        for bag in bags:
            offs.append(offs[-1] + len(bag))
        idx = [x for bag in bags for x in bag]
        off_addr, idx_addr, out_addr = addr, addr + 256, addr + 1024
        mem.write(off_addr, struct.pack(f"<{len(offs)}I", *offs))
        mem.write(idx_addr, struct.pack(f"<{len(idx)}I", *idx))
        addr += 1 << 16
        cmds.append((log, make_cmd(tag, dim, len(bags), off_addr, idx_addr, out_addr)))
        read = issue_order(bags, ROWS)
        if log:
            for r in read:
                exp.row(TABLE_ID, r, dim, TABLE_BASE, contents[r])
        # completion and outputs (bags before the failing one)
        done_bags = []
        for bag in bags:
            if any(x >= ROWS for x in bag):
                break
            done_bags.append(bag)
        err = LookupErrorCode.INDEX_RANGE if len(done_bags) < len(bags) else 0
        outs = [[sat32(sum(contents[r][e] for r in bag)) for e in range(dim)]
                for bag in done_bags]
        expect_cpl.append((err, sum(len(b) for b in done_bags), out_addr, outs))
    assert len(exp.records) >= 10

    m = Module()
    m.submodules.gather = g = GatherReduce(CFG)
    m.submodules.logger = lg = UndoLogger(CFG)
    m.submodules.mux = mux = RequestPortMux(CFG.addr_bits, [(0, 1, 2), (8, 9)])
    wiring.connect(m, g.mem, mux.req_0)
    wiring.connect(m, lg.mem, mux.req_1)
    wiring.connect(m, g.log_rows, lg.tee_rows)
    wiring.connect(m, g.log_lines, lg.tee_lines)
    cpls = []
    seen = {"tee_valid_nolog": 0}

    async def tb(ctx):
        ctx.set(lg.batch, BATCH)
        ctx.set(lg.epoch, EPOCH)
        ctx.set(g.table_id, TABLE_ID)
        cpl_stall = Stall(rng, 0.3)
        for log, cmd in cmds:
            ctx.set(g.log, log)
            ctx.set(g.cmd.payload, cmd)
            ctx.set(g.cmd.valid, 1)
            while True:
                *_, r = await ctx.tick().sample(g.cmd.ready)
                if r:
                    break
            ctx.set(g.cmd.valid, 0)
            ctx.set(g.log, 0 if log else 1)     # sampled with cmd only
            while True:
                ctx.set(g.cpl.ready, 0 if cpl_stall() else 1)
                *_, v, r, p, rv, lv = await ctx.tick().sample(
                    g.cpl.valid, g.cpl.ready, g.cpl.payload, g.log_rows.valid,
                    g.log_lines.valid)
                if not log and (rv or lv):
                    seen["tee_valid_nolog"] += 1
                if v and r:
                    cpls.append(p)
                    break
            ctx.set(g.cpl.ready, 0)
        for _ in range(5000):
            if ctx.get(lg.idle):
                break
            await ctx.tick()
        await ctx.tick()
        seen["records"] = ctx.get(lg.records)
        seen["idle"] = ctx.get(lg.idle)

    async def serve(ctx):
        await mem.serve(ctx, mux.mem)

    simulate(m, [tb], [serve], max_cycles=40000, name=f"gather_log_{seed}")
    assert seen["idle"], f"seed={seed}: logger not idle at the end"
    assert seen["tee_valid_nolog"] == 0, f"seed={seed}: tee streams valid without LOG"
    for p, (err, rows, out_addr, outs) in zip(cpls, expect_cpl):
        assert (int(p.err_code), int(p.rows)) == (err, rows), f"seed={seed}: cpl {p}"
        for b, words in enumerate(outs):
            got = struct.unpack(f"<{dim}i", mem.read(out_addr + b * dim * 4, dim * 4))
            assert list(got) == words, f"seed={seed}: tag {p.tag} bag {b} output"
    assert seen["records"] == len(exp.records), \
        f"seed={seed}: {seen['records']} records, expected {len(exp.records)}"
    for s, rec in enumerate(exp.records):
        got = mem.read(CFG.log_base + 576 * s, 64 + dim * 4)
        assert got == rec, \
            f"seed={seed}: log slot {s}\n got {got[:64].hex()}\n exp {rec[:64].hex()}"
    tail = mem.read(CFG.log_base + 576 * len(exp.records), 576)
    assert tail == bytes(576), f"seed={seed}: slot after the last record was written"
    assert mem.log_writes == len(exp.records) * (1 + dim // 16), f"seed={seed}: extra log writes"


def _cycles_without_and_with_log(cfg, rng, dim, bags, name):
    """The same LOOKUP of ``bags`` (dim ``dim``, fixed 20-cycle latency, no stalls) run without
    and then with LOG through GatherReduce + UndoLogger; returns (completion ``cycles`` of
    both, records the logger wrote, the memory)."""
    mem = Memory(rng, p_stall=0.0, lat=(20, 20))
    for r in range(ROWS):
        mem.write(TABLE_BASE + r * dim * 4, struct.pack(f"<{dim}i", *row_words(r, dim)))
    n = len(bags)
    offs = [0]
    for bag in bags:
        offs.append(offs[-1] + len(bag))
    idx = [x for bag in bags for x in bag]
    mem.write(STG, struct.pack(f"<{n + 1}I", *offs))
    mem.write(STG + 256, struct.pack(f"<{len(idx)}I", *idx))
    cmd = make_cmd(0, dim, n, STG, STG + 256, STG + 4096)

    m = Module()
    m.submodules.gather = g = GatherReduce(cfg)
    m.submodules.logger = lg = UndoLogger(cfg)
    m.submodules.mux = mux = RequestPortMux(cfg.addr_bits, [(0, 1, 2), (8, 9)])
    wiring.connect(m, g.mem, mux.req_0)
    wiring.connect(m, lg.mem, mux.req_1)
    wiring.connect(m, g.log_rows, lg.tee_rows)
    wiring.connect(m, g.log_lines, lg.tee_lines)
    cycles, records = [], []

    async def tb(ctx):
        ctx.set(g.table_id, 1)
        for log in (0, 1):
            ctx.set(g.log, log)
            ctx.set(g.cmd.payload, cmd)
            ctx.set(g.cmd.valid, 1)
            while True:
                *_, r = await ctx.tick().sample(g.cmd.ready)
                if r:
                    break
            ctx.set(g.cmd.valid, 0)
            ctx.set(g.cpl.ready, 1)
            while True:
                *_, v, p = await ctx.tick().sample(g.cpl.valid, g.cpl.payload)
                if v:
                    cycles.append(int(p.cycles))
                    assert int(p.err_code) == 0
                    break
            ctx.set(g.cpl.ready, 0)
            while not ctx.get(lg.idle):
                await ctx.tick()
        records.append(ctx.get(lg.records))

    async def serve(ctx):
        await mem.serve(ctx, mux.mem)

    simulate(m, [tb], [serve], max_cycles=20000, name=name)
    return cycles, records[0], mem


def test_log_does_not_slow_the_lookup_when_rows_are_logged():
    """No stalls, fixed 20-cycle latency, max_reads 64, dim 16, 8 bags x 16 rows drawn from 4
    rows: the same LOOKUP without LOG and then with LOG (4 new records, 124 rows already
    logged) take about the same number of cycles (``cycles`` of the completions), i.e. the tee
    drains one line per cycle."""
    rng = make_rng(9)
    cfg = CFG.with_(max_reads=64)         # covers the latency: one line per cycle
    hot = [2, 9, 17, 30]
    bags = [[rng.choice(hot) for _ in range(16)] for _ in range(8)]
    cycles, records, _ = _cycles_without_and_with_log(cfg, rng, 16, bags, "gather_log_rate")
    assert records == 4
    # 4 header cycles for the new records, a few for the tee FIFOs at the end
    assert cycles[1] <= cycles[0] + 4 + 6, f"LOOKUP cycles without/with LOG: {cycles}"
    # 128 lines plus the offsets, indices, rows and write-ack latencies (20 each)
    assert cycles[0] < 128 + 5 * 20 + 20, f"LOOKUP without LOG too slow: {cycles}"


def test_log_of_new_rows_costs_no_lookup_cycles():
    """No stalls, fixed 20-cycle latency, max_reads 64, window 64, dim 64 (4 lines a row), 2
    bags x 4 rows, 8 distinct rows: every row is a new record (8 headers), yet the LOOKUP with
    LOG takes the same cycles as without (a few cycles of pipeline latency): the header of a
    record costs no tee cycle while the write port keeps up (40 log writes + 8 output writes
    for 32 tee lines: the data queue absorbs the burst)."""
    rng = make_rng(10)
    cfg = CFG.with_(max_reads=64, log_window=64, log_set_sets=64, log_set_ways=2)
    rows = rng.sample(range(ROWS), 8)
    bags = [rows[4 * b:4 * b + 4] for b in range(2)]
    cycles, records, mem = _cycles_without_and_with_log(cfg, rng, 64, bags,
                                                        "gather_log_new_rate")
    assert records == 8
    print(f"LOOKUP cycles without/with LOG (8 new records, dim 64): {cycles}")
    assert mem.log_writes == 8 * 5, f"log writes {mem.log_writes}"
    assert cycles[1] <= cycles[0] + 4, f"LOOKUP cycles without/with LOG: {cycles}"
    assert cycles[0] < 32 + 5 * 20 + 20, f"LOOKUP without LOG too slow: {cycles}"
