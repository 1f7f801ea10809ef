"""UndoLogger (hw/undolog/logger.py) against an independent model of docs/training.md section 5:
records byte-exact (header by hw.encodings.pack_fields, CRC by zlib), logged-set hash, insert
and overflow, the ensure path (record persistent before its answer), log full, retire, the
window limit, reset, writes in slot order (every test), and a long run of new rows taken at one
line per cycle by a deep write buffer while the write port is slower."""
import zlib

import pytest
from amaranth.hdl import ClockDomain, Module

from hw.config import DeviceConfig
from hw.encodings import LOG_HDR_FIELDS, LOG_MAGIC, DeviceError, pack_fields
from hw.reqport import RD_CUR
from hw.undolog import UndoLogger

from pysim_util import Stall, check_stream, make_rng, simulate

BATCH = 0x0123_4567_89AB_CDEF
EPOCH = 0x0000_0042_0000_0007
TABLE_BASE = 0x1_0000_0000


def cfg_of(slots=64, sets=4, ways=2, window=4, buf=16):
    """A small logger; ``buf`` (log_buffer_lines) small by default so that the tests also run
    with the write buffer full (tee back-pressured by the write port)."""
    return DeviceConfig(log_size=576 * slots, log_set_sets=sets, log_set_ways=ways,
                        log_window=window, log_buffer_lines=buf)


def line_bytes(line_addr, salt=0):
    """Memory contents of a line: a hash of its address (so misplaced lines are visible)."""
    x = (line_addr * 0x9E37_79B9_7F4A_7C15 + salt * 0x1234_5678_9ABC) & ((1 << 64) - 1)
    out = bytearray()
    for i in range(8):
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        out += x.to_bytes(8, "little")
    return bytes(out)


def row_addr(table, row, dim_log):
    return TABLE_BASE + (table << 24) + row * (64 << dim_log)


def row_entry(table, row, dim_log):
    return {"table": table, "row": row, "addr": row_addr(table, row, dim_log), "dim_log": dim_log}


# ---- independent model -------------------------------------------------------------------------

class LogModel:
    """docs/training.md section 5: the logged set, slots and record images."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ways = [[None] * cfg.log_set_ways for _ in range(cfg.log_set_sets)]
        self.s = cfg.log_set_sets.bit_length() - 1
        self.next = 0
        self.overflow = 0
        self.full_events = 0
        self.image = {}            # slot -> bytes of the record (header + data lines)

    def h(self, table, row):
        return (row ^ (row >> self.s) ^ table) & (self.cfg.log_set_sets - 1)

    def logged(self, table, row):
        return (table, row) in self.ways[self.h(table, row)]

    def insert(self, table, row):
        ways = self.ways[self.h(table, row)]
        if None in ways:
            ways[ways.index(None)] = (table, row)
        else:
            self.overflow += 1

    def record(self, table, row, dim_log, data, bad=False):
        """``bad``: a line was read with a media error: the CRC state after the data lines has
        bit 0 flipped, so the stored CRC cannot match (hw/undolog/logger.py)."""
        dim = 16 << dim_log
        addr = row_addr(table, row, dim_log)
        vals = {"magic": LOG_MAGIC, "table": table, "dim": dim, "batch": BATCH, "row": row,
                "addr": addr, "epoch": EPOCH}
        hdr0 = pack_fields(LOG_HDR_FIELDS, vals, 64)
        crc = zlib.crc32(hdr0, zlib.crc32(data) ^ int(bad))
        assert bad == (crc != zlib.crc32(data + hdr0))
        self.image[self.next] = pack_fields(LOG_HDR_FIELDS, dict(vals, crc=crc), 64) + data
        self.next += 1

    def tee(self, table, row, dim_log, data, bad=False):
        """``bad``: a line of the row was read with an error: the record cannot match its CRC
        and the row does not stay in the logged set."""
        if self.logged(table, row):
            return
        if self.next == self.cfg.log_slots:
            self.full_events += 1
            return
        if not bad:
            self.insert(table, row)
        self.record(table, row, dim_log, data, bad=bad)

    def ensure(self, table, row, dim_log, data, media=False):
        if self.logged(table, row):
            return 0
        if self.next == self.cfg.log_slots:
            self.full_events += 1
            return DeviceError.LOG_FULL
        self.record(table, row, dim_log, data, bad=media)
        if media:
            return DeviceError.MEDIA
        self.insert(table, row)
        return 0

    def retire(self):
        self.ways = [[None] * self.cfg.log_set_ways for _ in range(self.cfg.log_set_sets)]
        self.next = 0


def row_data(table, row, dim_log, salt=0):
    a = row_addr(table, row, dim_log) >> 6
    return b"".join(line_bytes(a + k, salt) for k in range(1 << dim_log))


# ---- bench -------------------------------------------------------------------------------------

class Bench:
    """UndoLogger with a behavioural memory (in-order responses, random latency and request
    stalls), a window/persistence monitor and a log image."""

    def __init__(self, cfg, rng, *, rd_lat=(1, 8), wr_lat=(1, 12), p_stall=0.3, p_wstall=None,
                 with_reset=False):
        self.cfg, self.rng = cfg, rng
        self.dut = UndoLogger(cfg)
        if with_reset:
            self.top = Module()
            self.top.domains.sync = self.cd = ClockDomain("sync")
            self.top.submodules.dut = self.dut
        else:
            self.top = self.dut
        self.rd_lat, self.wr_lat = rd_lat, wr_lat
        self.rstall = Stall(rng, p_stall)
        self.wstall = Stall(rng, p_stall if p_wstall is None else p_wstall)
        self.base = cfg.log_base >> 6
        self.log = {}                 # line address -> 64 bytes written
        self.issued = {}              # slot -> writes issued
        self.acked = {}               # slot -> writes acknowledged
        self.open = set()             # slots with a write issued and not all acknowledged
        self.dims = {}                # slot -> number of writes the record needs (header seen)
        self.max_open = 0
        self.last_slot = 0            # slot of the latest write (writes go in slot order)
        self.reads = []               # (line, cycle) of every read
        self.rd_err_lines = set()
        self.wr_err_lines = set()
        self.cycle = 0

    def clear_tracking(self):
        """Forget the log image (after a retire or reset, slots are reused)."""
        self.log, self.issued, self.acked, self.dims = {}, {}, {}, {}
        self.open = set()
        self.last_slot = 0

    def slot_bytes(self, slot):
        n = self.dims.get(slot, 0)
        return b"".join(self.log.get(self.base + 9 * slot + j, b"?" * 64) for j in range(n))

    def persistent(self, slot):
        return slot in self.dims and self.acked.get(slot, 0) == self.dims[slot]

    def background(self):
        d = self.dut
        return [self.memory, check_stream(d.mem.rd_req, "rd_req"),
                check_stream(d.mem.wr_req, "wr_req"), check_stream(d.ensure_done, "ensure_done")]

    def _close(self, slot):
        if slot in self.dims and self.acked.get(slot, 0) == self.dims[slot]:
            self.open.discard(slot)

    async def memory(self, ctx):
        mem = self.dut.mem
        rq, wq = [], []               # (release cycle, line)
        t = 0
        while True:
            ctx.set(mem.rd_req.ready, 0 if self.rstall() else 1)
            ctx.set(mem.wr_req.ready, 0 if self.wstall() else 1)
            rh = rq[0] if rq and rq[0][0] <= t else None
            wh = wq[0] if wq and wq[0][0] <= t else None
            ctx.set(mem.rd_resp.valid, rh is not None)
            if rh is not None:
                ctx.set(mem.rd_resp.payload, {"id": 8, "err": rh[1] in self.rd_err_lines,
                                              "data": int.from_bytes(line_bytes(rh[1]), "little")})
            ctx.set(mem.wr_resp.valid, wh is not None)
            if wh is not None:
                ctx.set(mem.wr_resp.payload, {"id": 9, "err": wh[1] in self.wr_err_lines})
            *_, qv, qr, qp, rr, wv, wr, wp, br = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, mem.rd_resp.ready,
                mem.wr_req.valid, mem.wr_req.ready, mem.wr_req.payload, mem.wr_resp.ready)
            t += 1
            self.cycle = t
            if rh is not None and rr:
                rq.pop(0)
            if wh is not None:
                assert br, "wr_resp back-pressured"
                wq.pop(0)
                slot = (wh[1] - self.base) // 9
                self.acked[slot] = self.acked.get(slot, 0) + 1
                self._close(slot)
            if qv and qr:
                assert qp.id == 8 and qp.op == RD_CUR, f"bad read {qp}"
                self.reads.append((qp.addr, t))
                rq.append((max([t + self.rng.randint(*self.rd_lat)] + [r for r, _ in rq[-1:]]),
                           qp.addr))
            if wv and wr:
                line = int(wp.addr)
                assert wp.id == 9, f"write id {wp.id}"
                assert wp.be == (1 << 64) - 1, "partial write"
                slot, j = divmod(line - self.base, 9)
                assert 0 <= slot < self.cfg.log_slots, f"write outside the log: line {line:#x}"
                assert slot >= self.last_slot, \
                    f"write to slot {slot} after a write to slot {self.last_slot}"
                self.last_slot = slot
                data = int(wp.data).to_bytes(64, "little")
                self.log[line] = data
                if j == 0:
                    dim = int.from_bytes(data[6:8], "little")
                    self.dims[slot] = 1 + dim // 16
                self.issued[slot] = self.issued.get(slot, 0) + 1
                self.open.add(slot)
                self.max_open = max(self.max_open, len(self.open))
                assert len(self.open) <= self.cfg.log_window, \
                    f"{len(self.open)} records with writes in flight > window"
                wq.append((max([t + self.rng.randint(*self.wr_lat)] + [r for r, _ in wq[-1:]]),
                           line))

    async def tee(self, ctx, rows, p_gap=0.3, bad=()):
        """Send ``rows`` [(table, row, dim_log, data)] on tee_rows and their lines on tee_lines,
        both streams driven independently with random gaps (lines may be offered early);
        ``bad``: (row position, line) pairs sent with ``err``."""
        d = self.dut
        ents = [row_entry(t, r, dl) for t, r, dl, _ in rows]
        lines = [(int.from_bytes(data[64 * k:64 * (k + 1)], "little"), (i, k) in bad)
                 for i, (_, _, dl, data) in enumerate(rows) for k in range(1 << dl)]
        gap = Stall(self.rng, p_gap)
        ri = li = 0
        rv = lv = False
        while ri < len(ents) or li < len(lines):
            if not rv and ri < len(ents) and not gap():
                ctx.set(d.tee_rows.payload, ents[ri])
                rv = True
            if not lv and li < len(lines) and not gap():
                ctx.set(d.tee_lines.payload, {"data": lines[li][0], "err": lines[li][1]})
                lv = True
            ctx.set(d.tee_rows.valid, rv)
            ctx.set(d.tee_lines.valid, lv)
            *_, rr, lr = await ctx.tick().sample(d.tee_rows.ready, d.tee_lines.ready)
            if rv and rr:
                ri, rv = ri + 1, False
            if lv and lr:
                li, lv = li + 1, False
        ctx.set(d.tee_rows.valid, 0)
        ctx.set(d.tee_lines.valid, 0)

    async def ensure(self, ctx, table, row, dim_log, seed, p_stall=0.3):
        """One ensure request; returns (err_code, reads issued for it, slots persistent at the
        answer)."""
        d = self.dut
        n_reads = len(self.reads)
        stall = Stall(self.rng, p_stall)
        ctx.set(d.ensure.payload, row_entry(table, row, dim_log))
        ctx.set(d.ensure.valid, 1)
        taken = False
        while True:
            ctx.set(d.ensure_done.ready, 0 if stall() else 1)
            *_, er, dv, dr, dp = await ctx.tick().sample(
                d.ensure.ready, d.ensure_done.valid, d.ensure_done.ready, d.ensure_done.payload)
            if dv and dr:
                # taken into the logger's lookup stage at least a cycle before its answer
                assert taken, f"seed={seed}: ensure answered before it was taken"
                break
            if er:
                ctx.set(d.ensure.valid, 0)
                taken = True
        ctx.set(d.ensure_done.ready, 0)
        persistent = {s for s in self.dims if self.persistent(s)}
        return int(dp.err_code), [a for a, _ in self.reads[n_reads:]], persistent

    async def wait_idle(self, ctx, limit=5000):
        for _ in range(limit):
            if ctx.get(self.dut.idle):
                await ctx.tick()      # let the memory model book this cycle's responses
                return
            await ctx.tick()
        raise AssertionError("logger did not become idle")

    async def status(self, ctx):
        return {k: int(ctx.get(getattr(self.dut, k)))
                for k in ("records", "set_overflow", "full", "full_events", "media_err")}

    def run(self, tb, name, max_cycles=30000):
        async def main(ctx):
            ctx.set(self.dut.batch, BATCH)
            ctx.set(self.dut.epoch, EPOCH)
            await tb(ctx)
        simulate(self.top, [main], self.background(), max_cycles=max_cycles, name=name)


def check_image(b, model, seed):
    """Every record of the model is in the log region, byte-exact and persistent; nothing else
    was written."""
    for slot in range(model.next):
        assert b.persistent(slot), f"seed={seed}: slot {slot} not persistent"
        got, exp = b.slot_bytes(slot), model.image[slot]
        assert got == exp, f"seed={seed}: slot {slot} differs\n got {got[:64].hex()}\n " \
                           f"exp {exp[:64].hex()}"
    assert set(b.dims) == set(range(model.next)), \
        f"seed={seed}: slots written {sorted(b.dims)}, expected 0..{model.next - 1}"
    assert all(b.issued[s] == b.dims[s] for s in b.dims), f"seed={seed}: extra writes"

def timed_tee(cfg, rows, rng, name, seed, *, idle_limit=5000, **bench_kw):
    """Tee ``rows`` back to back into a ``Bench(cfg, rng, **bench_kw)``, wait until the logger is
    idle, check the log image against the model of ``rows``; returns the model and the cycles
    of the tee (``tee``) and until idle (``idle``)."""
    model = LogModel(cfg)
    for row in rows:
        model.tee(*row)
    b = Bench(cfg, rng, **bench_kw)
    cycles = {}

    async def tb(ctx):
        t0 = b.cycle
        await b.tee(ctx, rows, p_gap=0.0)
        cycles["tee"] = b.cycle - t0
        await b.wait_idle(ctx, limit=idle_limit)
        cycles["idle"] = b.cycle - t0
    b.run(tb, name)
    check_image(b, model, seed)
    return model, cycles



def random_rows(rng, n, keys, dims=(0, 1, 2, 3), salt=0):
    """``n`` row reads drawn from ``keys`` (duplicates likely); one dim per table."""
    out = []
    for i in range(n):
        t, r = rng.choice(keys)
        dl = dims[t % len(dims)]
        out.append((t, r, dl, row_data(t, r, dl, salt=salt + i)))
    return out


# ---- tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,sets,ways,window", [(1, 4, 2, 3), (2, 4, 2, 3), (3, 4, 2, 3),
                                                   (4, 1, 1, 1), (5, 16, 3, 8)])
def test_tee_records_byte_exact_with_duplicates_and_set_overflow(seed, sets, ways, window):
    """70 row reads over 4 tables x 11 rows (duplicates, dims 16..128) through a small set
    (``sets`` x ``ways``) and window: the log region holds exactly the model's records (header
    fields incl. batch and epoch, zlib CRC, data of the occurrence that was logged), slots 0..
    in order; ``records`` and ``set_overflow`` equal the model's; nothing full."""
    cfg = cfg_of(slots=128, sets=sets, ways=ways, window=window)
    rng = make_rng(seed)
    keys = [(t, rng.randrange(1 << 20)) for t in range(4) for _ in range(11)]
    rows = random_rows(rng, 70, keys)
    model = LogModel(cfg)
    for t, r, dl, data in rows:
        model.tee(t, r, dl, data)
    assert model.overflow > 0 and model.next < 70, "stimulus must hit and overflow the set"
    b = Bench(cfg, rng)
    st = {}

    async def tb(ctx):
        await b.tee(ctx, rows)
        await b.wait_idle(ctx)
        st.update(await b.status(ctx))
    b.run(tb, f"undolog_tee_{seed}")
    check_image(b, model, seed)
    assert st == {"records": model.next, "set_overflow": model.overflow, "full": 0,
                  "full_events": 0, "media_err": 0}, f"seed={seed}: {st}"


def test_set_index_hash_of_training_md():
    """8 sets x 1 way: row 1 and row 8 share set 1 under h = (row ^ row>>3 ^ table) & 7 (not
    under row & 7), as do (table 1, row 0) and (table 0, row 72). Sequence 1, 8, 1, 8, (1,0),
    (0,72): row 1 logged, 8 overflows (logged twice), 1 hits, (1,0) and (0,72) overflow too ->
    5 records."""
    cfg = cfg_of(slots=16, sets=8, ways=1, window=4)
    seq = [(0, 1), (0, 8), (0, 1), (0, 8), (1, 0), (0, 72)]
    rows = [(t, r, 0, row_data(t, r, 0, salt=i)) for i, (t, r) in enumerate(seq)]
    model = LogModel(cfg)
    for row in rows:
        model.tee(*row)
    assert (model.next, model.overflow) == (5, 4)
    b = Bench(cfg, make_rng(5))
    st = {}

    async def tb(ctx):
        await b.tee(ctx, rows)
        await b.wait_idle(ctx)
        st.update(await b.status(ctx))
    b.run(tb, "undolog_hash")
    check_image(b, model, 5)
    assert (st["records"], st["set_overflow"]) == (5, 4), st


def test_back_to_back_duplicate_sees_previous_insert_full_rate():
    """No gaps, no stalls: rows A, A, B, B, A (dim 16) — each second occurrence is a hit (the
    insert is visible to the very next row): 2 records; and 40 repeats of one logged row drain
    at one line per cycle."""
    cfg = cfg_of(slots=16, sets=4, ways=2, window=8)
    rows = [(0, r, 0, row_data(0, r, 0, salt=i)) for i, r in enumerate([5, 5, 6, 6, 5])]
    rows += [(0, 5, 0, row_data(0, 5, 0, salt=99))] * 40
    _, cycles = timed_tee(cfg, rows, make_rng(6), "undolog_b2b", 6, p_stall=0.0,
                          wr_lat=(1, 2))
    print(f"tee cycles for 45 lines (2 new records): {cycles['tee']}")
    # 45 lines + 1 (the 2 headers cost no tee cycle; with a header cycle each: 47)
    assert cycles["tee"] <= 45 + 1, f"tee took {cycles['tee']} cycles for 45 lines"


def test_new_records_take_one_line_per_cycle():
    """No gaps, write port always ready, short latency: 4 new rows of dim 64 (16 lines, 20
    writes) are taken at one line per cycle (the headers queue behind their data lines; the
    burst fits the data queue), records byte-exact and in order (a header cycle per record
    would show as 3 extra cycles: the last header comes after the last line)."""
    cfg = cfg_of(slots=16, sets=4, ways=2, window=8)
    rows = [(1, r, 2, row_data(1, r, 2, salt=r)) for r in (3, 4, 5, 6)]
    _, cycles = timed_tee(cfg, rows, make_rng(8), "undolog_new_rate", 8, p_stall=0.0,
                          wr_lat=(1, 2))
    print(f"tee cycles for 16 lines of 4 new dim-64 records: {cycles['tee']}")
    assert cycles["tee"] <= 16 + 1, f"tee took {cycles['tee']} cycles for 16 lines"


@pytest.mark.parametrize("buf", [512, 16])
def test_long_run_of_new_rows_not_stalled_by_a_slow_write_port(buf):
    """No tee gaps; the write port is ready about half the time (random, seeded), write latency
    5..30: 160 new rows (3 of dim 16, then 1 of dim 64: 280 tee lines, 440 record writes). With
    a 512-line write buffer the tee takes every line at one per cycle (<= 280 + 2 cycles; the
    backlog of about 300 lines fits); with 16 lines it waits for the write port (> 1.5 x 280
    cycles: the test can see a stall). Either way the log holds exactly the model's records,
    in slot order."""
    seed = 41
    cfg = cfg_of(slots=200, sets=256, ways=2, window=1024, buf=buf)
    rng = make_rng(seed)
    keys = rng.sample(range(1 << 20), 160)
    rows = [(3, r, (0, 0, 0, 2)[i % 4], row_data(3, r, (0, 0, 0, 2)[i % 4], salt=i))
            for i, r in enumerate(keys)]
    n_lines = sum(1 << dl for _, _, dl, _ in rows)
    assert n_lines == 280
    model, cycles = timed_tee(cfg, rows, rng, f"undolog_long_run_{buf}", seed,
                              idle_limit=20000, p_stall=0.0, p_wstall=0.5, wr_lat=(5, 30))
    assert model.next == 160
    print(f"buffer {buf}: tee {cycles['tee']} cycles for {n_lines} lines, idle after "
          f"{cycles['idle']}")
    if buf == 512:
        assert cycles["tee"] <= n_lines + 2, \
            f"seed={seed}: tee took {cycles['tee']} cycles for {n_lines} lines"
    else:
        assert cycles["tee"] > 1.5 * n_lines, \
            f"seed={seed}: tee took {cycles['tee']} cycles with a 16-line buffer"


def test_ensure_hits_one_per_cycle():
    """After a tee of 6 rows: 60 ensure requests of logged rows, offered back to back with
    ``ensure_done`` always ready, are answered 0 at one per cycle (no read, no write); then
    with random ``ensure_done`` back-pressure every answer is still 0 and in order (stream
    rules checked by ``check_stream``)."""
    cfg = cfg_of(slots=16, sets=8, ways=2, window=4)
    rng = make_rng(13)
    keys = [(2, r) for r in (3, 4, 9, 10, 11, 12)]
    tee_rows = [(t, r, 1, row_data(t, r, 1)) for t, r in keys]
    model = LogModel(cfg)
    for row in tee_rows:
        model.tee(*row)
    reqs = [rng.choice(keys) for _ in range(60)]
    assert all(model.ensure(t, r, 1, b"") == 0 for t, r in reqs)
    b = Bench(cfg, rng)
    got = {}

    async def burst(ctx, p_stall):
        d = b.dut
        stall = Stall(rng, p_stall)
        answers, i, t0 = [], 0, b.cycle
        n_writes, n_reads = sum(b.issued.values()), len(b.reads)
        ctx.set(d.ensure.valid, 1)
        ctx.set(d.ensure.payload, row_entry(*reqs[0], 1))
        while len(answers) < len(reqs):
            ctx.set(d.ensure_done.ready, 0 if stall() else 1)
            *_, er, dv, dr, dp = await ctx.tick().sample(
                d.ensure.ready, d.ensure_done.valid, d.ensure_done.ready, d.ensure_done.payload)
            if dv and dr:
                answers.append(int(dp.err_code))
                assert len(answers) <= i, "an ensure answered before it was taken"
            if er:
                i += 1
                ctx.set(d.ensure.valid, i < len(reqs))
                if i < len(reqs):
                    ctx.set(d.ensure.payload, row_entry(*reqs[i], 1))
            # taken into the lookup stage, which holds one ensure until its answer is taken
            assert i <= len(answers) + 1, f"{i} ensures taken, {len(answers)} answered"
        ctx.set(d.ensure_done.ready, 0)
        assert sum(b.issued.values()) == n_writes and len(b.reads) == n_reads, \
            "ensure of a logged row read or wrote"
        return answers, b.cycle - t0

    async def tb(ctx):
        await b.tee(ctx, tee_rows)
        await b.wait_idle(ctx)
        got["fast"] = await burst(ctx, 0.0)
        got["stall"] = await burst(ctx, 0.4)
    b.run(tb, "undolog_ensure_rate")
    check_image(b, model, 13)
    answers, cyc = got["fast"]
    print(f"60 ensure hits in {cyc} cycles")
    assert answers == [0] * 60 and got["stall"][0] == [0] * 60, got
    assert cyc <= 60 + 1, f"60 ensure hits took {cyc} cycles (old: 2 per hit)"


def test_window_limit_reached_never_exceeded():
    """Slow write acknowledgements (30..60 cycles), 20 new rows, window 3: at most 3 records have
    writes in flight at any time (monitor) and the limit is actually reached."""
    cfg = cfg_of(slots=32, sets=32, ways=2, window=3)
    rng = make_rng(7)
    rows = [(1, 100 + i, i % 4, row_data(1, 100 + i, i % 4)) for i in range(20)]
    model = LogModel(cfg)
    for row in rows:
        model.tee(*row)
    b = Bench(cfg, rng, wr_lat=(30, 60))

    async def tb(ctx):
        await b.tee(ctx, rows)
        await b.wait_idle(ctx)
    b.run(tb, "undolog_window")
    check_image(b, model, 7)
    assert b.max_open == 3, f"max records in flight {b.max_open}"


@pytest.mark.parametrize("seed", [41, 42])
def test_tee_row_read_in_error_never_logged_valid(seed):
    """A tee row with a line read in error (line 2 of a 4-line row, line 0 of a 1-line row):
    its slot gets a record whose CRC cannot match, the row leaves the logged set (its next,
    non-adjacent occurrence is logged again, validly; an ensure of the other one reads and logs
    it), ``media_err`` stays 0 (the LOOKUP reports its own error); the other rows are logged as
    usual, byte-exact."""
    cfg = cfg_of(slots=64, sets=8, ways=2, window=4)
    rng = make_rng(seed)
    rows = [(1, 5, 2), (1, 6, 1), (1, 5, 2), (1, 7, 0), (1, 8, 1), (1, 6, 1)]
    rows = [(t, r, dl, row_data(t, r, dl)) for t, r, dl in rows]
    bad = {(0, 2), (3, 0)}
    model = LogModel(cfg)
    for i, row in enumerate(rows):
        model.tee(*row, bad=any(j == i for j, _ in bad))
    assert model.next == 5 and not model.logged(1, 7) and model.logged(1, 5)
    b = Bench(cfg, rng)

    async def tb(ctx):
        await b.tee(ctx, rows, bad=bad)
        await b.wait_idle(ctx)
        st = await b.status(ctx)
        assert st["records"] == model.next and st["media_err"] == 0, f"seed={seed}: {st}"
        err, reads, _ = await b.ensure(ctx, 1, 5, 2, seed)
        assert (err, reads) == (0, []), f"seed={seed}: row 5 not logged after its re-log"
        slot = model.next
        assert model.ensure(1, 7, 0, row_data(1, 7, 0)) == 0
        err, reads, persistent = await b.ensure(ctx, 1, 7, 0, seed)
        assert err == 0 and reads == [row_addr(1, 7, 0) >> 6] and slot in persistent, \
            f"seed={seed}: row 7 (failed tee read) not logged by ensure: {err} {reads}"
        await b.wait_idle(ctx)
    b.run(tb, f"undolog_tee_err_{seed}")
    check_image(b, model, seed)


@pytest.mark.parametrize("seed", [11, 12])
def test_ensure_path(seed):
    """After a tee: ensure of a tee-logged row answers 0 with no read and no write; a new row is
    read (its dim/16 lines, RdCur, id 8, in order), its record is byte-exact and persistent
    before the answer, then it is in the set (a second ensure: no reads); a read error answers
    MEDIA, writes the record with a CRC that cannot match and does not insert (the next ensure
    logs it again)."""
    cfg = cfg_of(slots=64, sets=8, ways=2, window=4)
    rng = make_rng(seed)
    tee_rows = [(2, r, 1, row_data(2, r, 1)) for r in (3, 4, 3, 9)]
    model = LogModel(cfg)
    for row in tee_rows:
        model.tee(*row)
    b = Bench(cfg, rng)
    bad = (row_addr(3, 77, 2) >> 6) + 2
    b.rd_err_lines.add(bad)
    plan = [((2, 4, 1), False), ((3, 50, 3), False), ((3, 50, 3), False), ((2, 9, 1), False),
            ((3, 77, 2), True), ((0, 1, 0), False)]
    got = []

    async def tb(ctx):
        await b.tee(ctx, tee_rows)
        await b.wait_idle(ctx)
        for (t, r, dl), media in plan:
            slot = model.next
            exp = model.ensure(t, r, dl, row_data(t, r, dl), media=media)
            wrote = model.next != slot
            n_writes = sum(b.issued.values())
            err, reads, persistent = await b.ensure(ctx, t, r, dl, seed)
            got.append((t, r, err))
            assert err == exp, f"seed={seed}: ensure {(t, r)} err {err} expected {exp}"
            if wrote:
                first = row_addr(t, r, dl) >> 6
                assert reads == [first + k for k in range(1 << dl)], \
                    f"seed={seed}: ensure {(t, r)} reads {reads}"
                assert slot in persistent, f"seed={seed}: record {slot} not persistent at done"
                assert b.slot_bytes(slot) == model.image[slot], f"seed={seed}: record {slot}"
            else:
                assert reads == [] and sum(b.issued.values()) == n_writes, \
                    f"seed={seed}: ensure of a logged row read or wrote"
            if media:
                b.rd_err_lines.discard(bad)
        # the failed row was not inserted: it is logged again
        slot = model.next
        assert model.ensure(3, 77, 2, row_data(3, 77, 2)) == 0 and model.next == slot + 1
        err, reads, persistent = await b.ensure(ctx, 3, 77, 2, seed)
        assert err == 0 and len(reads) == 4 and slot in persistent, f"seed={seed}: re-log"
        await b.wait_idle(ctx)
        st = await b.status(ctx)
        assert st["records"] == model.next and st["media_err"] == 1, f"seed={seed}: {st}"
    b.run(tb, f"undolog_ensure_{seed}")
    check_image(b, model, seed)


def test_log_full_then_retire():
    """3 slots: 5 new tee rows -> 3 records, ``full`` and 2 full events; a logged row is still a
    hit (no event); ensure of a new row -> LOG_FULL (event 3), of a logged row -> 0. Retire (while
    idle) clears full, records and the set: the same rows are logged again from slot 0."""
    cfg = cfg_of(slots=3, sets=16, ways=2, window=2)
    rng = make_rng(21)
    rows = [(0, r, 1, row_data(0, r, 1)) for r in (10, 11, 12, 13, 14)]
    model = LogModel(cfg)
    for row in rows + rows[:1]:
        model.tee(*row)
    assert (model.next, model.full_events) == (3, 2)
    b = Bench(cfg, rng)

    async def tb(ctx):
        d = b.dut
        await b.tee(ctx, rows + rows[:1])
        await b.wait_idle(ctx)
        st = await b.status(ctx)
        assert st == {"records": 3, "set_overflow": 0, "full": 1, "full_events": 2,
                      "media_err": 0}, st
        check_image(b, model, 21)
        err, reads, _ = await b.ensure(ctx, 1, 5, 0, 21)
        assert (err, reads) == (DeviceError.LOG_FULL, []), err
        err, reads, _ = await b.ensure(ctx, 0, 11, 1, 21)
        assert (err, reads) == (0, []), err
        assert (await b.status(ctx))["full_events"] == 3
        await b.wait_idle(ctx)
        ctx.set(d.retire, 1)
        await ctx.tick()
        ctx.set(d.retire, 0)
        await ctx.tick()
        st = await b.status(ctx)
        assert (st["records"], st["full"], st["full_events"]) == (0, 0, 3), st
        b.clear_tracking()
        model.retire()
        for row in rows[:2]:
            model.tee(*row)
        await b.tee(ctx, rows[:2])
        await b.wait_idle(ctx)
        check_image(b, model, 21)
        assert (await b.status(ctx))["records"] == 2
    b.run(tb, "undolog_full")


def test_reset_clears_logged_set():
    """Rows logged, then a reset (the set memory keeps its contents; the valid bits must not):
    the same rows are logged again from slot 0 with byte-exact records."""
    cfg = cfg_of(slots=16, sets=4, ways=2, window=4)
    rng = make_rng(31)
    rows = [(1, r, 0, row_data(1, r, 0)) for r in (1, 2, 3)]
    b = Bench(cfg, rng, with_reset=True)

    async def tb(ctx):
        await b.tee(ctx, rows)
        await b.wait_idle(ctx)
        assert (await b.status(ctx))["records"] == 3
        ctx.set(b.cd.rst, 1)
        await ctx.tick()
        await ctx.tick()
        ctx.set(b.cd.rst, 0)
        st = await b.status(ctx)
        assert st["records"] == 0 and st["set_overflow"] == 0, st
        b.clear_tracking()
        await b.tee(ctx, rows)
        await b.wait_idle(ctx)
    b.run(tb, "undolog_reset")
    model = LogModel(cfg)
    for row in rows:
        model.tee(*row)
    check_image(b, model, 31)


class LoggedSetModel:
    """docs/training.md section 5's logged set, way by way, for LoggedSet alone."""

    def __init__(self, sets, ways):
        self.sets, self.n_ways = sets, ways
        self.ways = {}                 # set -> [key or None] * ways
        self.overflow = 0

    def set_of(self, key):
        table, row = key
        return (row ^ (row >> (self.sets.bit_length() - 1)) ^ table) & (self.sets - 1)

    def of(self, key):
        return self.ways.setdefault(self.set_of(key), [None] * self.n_ways)

    def answer(self, key):
        """(hit, hit_way one-hot, free_way one-hot) of ``key``."""
        ws = self.of(key)
        hit_way = sum(1 << w for w, k in enumerate(ws) if k == key)
        free = [w for w, k in enumerate(ws) if k is None]
        return int(hit_way != 0), hit_way, (1 << free[0]) if free else 0

    def insert(self, key):
        ws = self.of(key)
        if None in ws:
            ws[ws.index(None)] = key
        else:
            self.overflow += 1

    def remove(self, s, way_onehot):
        ws = self.ways.setdefault(s, [None] * self.n_ways)
        for w in range(self.n_ways):
            if way_onehot >> w & 1:
                ws[w] = None

    def clear(self):
        self.ways.clear()


def logged_set_dut(sets, ways, epoch_bits=None):
    from hw.undolog.logged_set import LoggedSet
    dut = Module()
    dut.domains.sync = cd = ClockDomain("sync")
    dut.submodules.logged = inner = LoggedSet(sets, ways, epoch_bits=epoch_bits)
    return dut, inner, cd.rst


async def check_answer(ctx, inner, model, key, what):
    got = (ctx.get(inner.hit), ctx.get(inner.hit_way), ctx.get(inner.free_way))
    assert got == model.answer(key), f"{what}: {key} answered {got}, model {model.answer(key)}"
    assert ctx.get(inner.set_index) == model.set_of(key), f"{what}: set of {key}"


def test_logged_set_epochs_against_model():
    """LoggedSet alone against a Python model (ways per set, overflow count): 4 sets x 2 ways,
    the narrowest epoch (3 bits, so it wraps every 8 clears or reset cycles); every cycle a
    new key may be loaded while the loaded one is inserted (if it misses), a way removed (the
    loaded key's, or another key's in any set), the set cleared, or reset held for 1..12
    cycles; keys collide in few sets, so a key's answer often depends on writes decided in
    the cycle of its load or while it waits in the stage (the bypass). ``hit``, ``hit_way``,
    ``free_way`` and ``set_index`` of the loaded key are checked every cycle. A stale way from
    an earlier epoch must never read as valid, also after the epoch has come round again."""
    seed = 77
    rng = make_rng(seed)
    sets, ways = 4, 2
    dut, inner, rst = logged_set_dut(sets, ways, epoch_bits=3)
    model = LoggedSetModel(sets, ways)
    stats = {"inserts": 0, "overflows": 0, "clears": 0, "resets": 0, "hits": 0, "removes": 0,
             "held": 0}

    async def tb(ctx):
        key = (0, 0)                   # the loaded key after reset
        cyc = 0
        while cyc < 8000:
            r = rng.random()
            if r < 0.01:                 # a reset of 1..12 cycles: everything empties
                for _ in range(rng.randint(1, 12)):
                    ctx.set(rst, 1)
                    ctx.set(inner.insert, rng.random() < 0.5)
                    ctx.set(inner.load, rng.random() < 0.5)
                    await ctx.tick()
                    cyc += 1
                ctx.set(rst, 0)
                ctx.set(inner.insert, 0)
                ctx.set(inner.load, 0)
                model.clear()
                model.overflow = 0
                key = (0, 0)
                stats["resets"] += 1
                continue
            await check_answer(ctx, inner, model, key, f"cycle {cyc} (seed {seed})")
            assert ctx.get(inner.overflow) == model.overflow, f"cycle {cyc}: overflow"
            hit, hit_way, free_way = model.answer(key)
            stats["hits"] += hit
            clear = r < 0.05
            insert = not hit and not clear and rng.random() < 0.5
            remove = None
            if not insert and not clear and rng.random() < 0.3:
                if hit and rng.random() < 0.5:
                    remove = (model.set_of(key), hit_way)
                else:
                    s = rng.randrange(sets)
                    remove = (s, 1 << rng.randrange(ways))
            load = rng.random() < 0.5
            new_key = (rng.randrange(2), rng.randrange(24))
            ctx.set(inner.insert, insert)
            ctx.set(inner.remove, remove is not None)
            ctx.set(inner.remove_set, remove[0] if remove else rng.randrange(sets))
            ctx.set(inner.remove_way, remove[1] if remove else rng.randrange(1 << ways))
            ctx.set(inner.clear, clear)
            ctx.set(inner.load, load)
            ctx.set(inner.row, new_key[1])
            ctx.set(inner.table, new_key[0])
            await ctx.tick()
            cyc += 1
            ctx.set(inner.insert, 0)
            ctx.set(inner.remove, 0)
            ctx.set(inner.clear, 0)
            ctx.set(inner.load, 0)
            if remove is not None:
                model.remove(*remove)
                stats["removes"] += 1
            if insert:
                before = model.overflow
                model.insert(key)
                stats["inserts" if model.overflow == before else "overflows"] += 1
            if clear:
                model.clear()
                stats["clears"] += 1
            if load:
                key = new_key
            else:
                stats["held"] += 1

    simulate(dut, [tb], max_cycles=10000, name="logged_set")
    print(f"logged set model test (seed {seed}): {stats}")
    assert (stats["clears"] > 100 and stats["resets"] > 20 and stats["overflows"] > 50
            and stats["hits"] > 200 and stats["removes"] > 200 and stats["held"] > 2000), \
        f"weak stimulus (seed {seed})"


# (name, steps): each step is (load key or None, insert, remove (set, way) or None, clear); the
# loaded key is checked against the model before each step and after the last. (0, 0) and (0, 5)
# share set 0 of 4 (row ^ row >> 2 ^ table).
BYPASS_CASES = [
    # the insert decided in the cycle the same key is loaded again: a hit next cycle
    ("insert_then_same_key_loaded_with_it",
     [((0, 0), 0, None, 0), ((0, 0), 1, None, 0), (None, 0, None, 0)]),
    # another key of the same set loaded with the insert: misses, and its free way is the next
    # one (inserting it must not overwrite the way just taken)
    ("insert_then_other_key_same_set",
     [((0, 0), 0, None, 0), ((0, 5), 1, None, 0), (None, 1, None, 0),
      ((0, 0), 0, None, 0), (None, 0, None, 0)]),
    # the same key loaded one cycle after its insert (the read meets the write being made)
    ("insert_then_load_a_cycle_later",
     [((0, 0), 0, None, 0), (None, 1, None, 0), ((0, 0), 0, None, 0), (None, 0, None, 0)]),
    # inserts decided while the other key waits in the stage (no new load)
    ("inserts_while_another_key_waits",
     [((0, 0), 0, None, 0), ((0, 5), 1, None, 0), (None, 1, None, 0), (None, 0, None, 0)]),
    # a removal decided with the load of the removed key, and a cycle before it
    ("remove_then_load_same_cycle",
     [((0, 0), 0, None, 0), (None, 1, None, 0), ((0, 0), 0, (0, 1), 0), (None, 0, None, 0)]),
    ("remove_then_load_a_cycle_later",
     [((0, 0), 0, None, 0), (None, 1, None, 0), (None, 0, (0, 1), 0), ((0, 0), 0, None, 0),
      (None, 0, None, 0)]),
    # a removal while the key waits in the stage
    ("remove_while_key_waits",
     [((0, 0), 0, None, 0), (None, 1, None, 0), ((0, 5), 0, None, 0), (None, 1, None, 0),
      (None, 0, (0, 1), 0), (None, 0, None, 0)]),
    # clear in the cycle of a load, and while the key waits, and between insert and write
    ("clear_with_the_load",
     [((0, 0), 0, None, 0), (None, 1, None, 0), ((0, 0), 0, None, 1), (None, 0, None, 0)]),
    ("clear_while_key_waits",
     [((0, 0), 0, None, 0), (None, 1, None, 0), (None, 0, None, 1), (None, 0, None, 0)]),
    ("clear_right_after_insert",
     [((0, 0), 0, None, 0), ((0, 5), 1, None, 0), (None, 0, None, 1), (None, 0, None, 0)]),
    # the epoch (3 bits for 4 sets) comes round again while an inserted key waits
    ("epoch_wraps_while_key_waits",
     [((0, 0), 0, None, 0), (None, 1, None, 0)] + [(None, 0, None, 1)] * 8
     + [(None, 0, None, 0)]),
]
# with 4 ways: (0, 0), (0, 5), (0, 10), (0, 15) and (0, 16) share set 0. The set is filled in
# order, so the last insert takes way 3 (the device has 8 ways: a way above the first ones).
_FILL_3 = [((0, 0), 0, None, 0), ((0, 5), 1, None, 0), ((0, 10), 1, None, 0),
           ((0, 15), 1, None, 0)]
BYPASS_CASES_4WAYS = [
    # the insert into way 3 is made in the cycle the same key is loaded again: a hit in way 3
    ("way3_insert_then_same_key_a_cycle_later",
     _FILL_3 + [(None, 1, None, 0), ((0, 15), 0, None, 0), (None, 0, None, 0)]),
    # ... and another key of the now full set loaded then: no free way (not way 3)
    ("way3_insert_then_other_key_a_cycle_later",
     _FILL_3 + [(None, 1, None, 0), ((0, 16), 0, None, 0), (None, 0, None, 0)]),
]


@pytest.mark.parametrize("name,steps,ways",
                         [(*c, 2) for c in BYPASS_CASES] + [(*c, 4) for c in BYPASS_CASES_4WAYS],
                         ids=[c[0] for c in BYPASS_CASES + BYPASS_CASES_4WAYS])
def test_logged_set_bypass(name, steps, ways):
    """LoggedSet's pipelined lookup with its same-set bypass: an insert, remove or clear decided
    in the cycle a key is loaded, a cycle before, or while it waits in the stage, is in the
    key's answer (``hit``, ``hit_way``, ``free_way``) the cycle after (4 sets x 2 or 4 ways)."""
    sets = 4
    dut, inner, _ = logged_set_dut(sets, ways)
    model = LoggedSetModel(sets, ways)
    assert {model.set_of((0, r)) for r in (0, 5, 10, 15, 16)} == {0}
    log = []

    async def tb(ctx):
        key = (0, 0)
        for i, (load, insert, remove, clear) in enumerate(steps):
            if i:                      # (step 0 loads the first key)
                await check_answer(ctx, inner, model, key, f"{name} step {i}")
            log.append((i, key, model.answer(key)))
            ctx.set(inner.load, load is not None)
            if load is not None:
                ctx.set(inner.table, load[0])
                ctx.set(inner.row, load[1])
            ctx.set(inner.insert, insert)
            ctx.set(inner.remove, remove is not None)
            if remove is not None:
                ctx.set(inner.remove_set, remove[0])
                ctx.set(inner.remove_way, remove[1])
            ctx.set(inner.clear, clear)
            await ctx.tick()
            if clear:
                model.clear()
            elif insert:
                model.insert(key)
            elif remove is not None:
                model.remove(*remove)
            if load is not None:
                key = load
        await check_answer(ctx, inner, model, key, f"{name} end")
        log.append(("end", key, model.answer(key)))
    simulate(dut, [tb], max_cycles=100, name=f"logged_set_{name}")
    print(name, log)
