"""PersistEngine (hw/persist/engine.py): superblock format, COMMIT, undo-log recovery
(docs/training.md section 6).

Log images are built here from the byte layouts (hw.encodings.pack_fields, zlib.crc32) and the
expected outcome of a recovery comes from :func:`model_recover`, a direct Python transcription of
section 6 steps 1-4 (recovery epoch included), independent of the RTL; the random tests also
cross-check it against ``sw_model.training.TrainingDevice.recover()`` on the same image. The memory is a dict of 64-byte lines behind a
responder with seeded random request stalls and in-order random response latency.
"""
import zlib

import pytest

from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice

from hw.config import DEFAULT
from hw.encodings import (LOG_HDR_FIELDS, LOG_MAGIC, LOG_SLOT_BYTES, SB_FIELDS, SB_MAGIC,
                          SB_VERSION, DeviceError, pack_fields, unpack_fields)
from hw.persist import PERSIST_ID, PersistEngine
from hw.reqport import RD_CUR

from pysim_util import LineImage, Stall, check_stream, make_rng, simulate

M64 = (1 << 64) - 1
FULL_BE = (1 << 64) - 1
TABLE_BASE = 1 << 20
TABLE_SIZE = 1 << 16
# 64 slots, small window; a table region that does not start at 0 so "below the region" exists
CFG = DEFAULT.with_(table_base=TABLE_BASE, table_size=TABLE_SIZE, log_size=64 * LOG_SLOT_BYTES,
                    log_window=4)
SB_LINE = CFG.superblock_base // 64
EPOCH_BE = 0xFF << 32                 # recovery_epoch: bytes 32..39 of the superblock line


# ---- image building ----------------------------------------------------------------------------

class Image(LineImage):
    """Memory as {line address: 64 bytes}; missing lines read as zeros."""

    def slot_line(self, cfg, s):
        return (cfg.log_base + s * LOG_SLOT_BYTES) // 64


def sb_bytes(committed, magic=SB_MAGIC, version=SB_VERSION, tail=b"", epoch=0):
    """Superblock line; ``tail``: bytes from 40 on (unused by section 6)."""
    raw = bytearray(pack_fields(SB_FIELDS, {"magic": magic, "version": version,
                                            "committed": committed,
                                            "recovery_epoch": epoch & M64}, 64))
    raw[40:40 + len(tail)] = tail
    return bytes(raw)


def sb_epoch(img):
    return unpack_fields(SB_FIELDS, img.get(SB_LINE))["recovery_epoch"]


def record_crc(hdr, data):
    """Section 5: CRC-32 over the data, then the whole header line with its crc bytes zero."""
    h = bytearray(hdr)
    h[20:24] = bytes(4)
    return zlib.crc32(bytes(data) + bytes(h))


def put_record(img, cfg, slot, *, batch, addr, dim, epoch, data=None, magic=LOG_MAGIC, rng=None,
               torn=False, crc=None, tail=b"", tail_after=b"", table=0, row=0):
    """Write a record into slot ``slot``; returns its data bytes. ``torn``: one data byte changed
    after the CRC was computed. ``tail``: junk in header bytes 40.. before the CRC is computed
    (covered by it; the device writes zeros there); ``tail_after``: junk in bytes 40.. written
    after the CRC (a corrupted header)."""
    if data is None:
        data = bytes(rng.randrange(256) for _ in range(max(dim, 16) * 4))
    fields = {"magic": magic, "table": table, "dim": dim, "batch": batch & M64, "row": row,
              "addr": addr, "epoch": epoch & M64}
    hdr = bytearray(pack_fields(LOG_HDR_FIELDS, fields, 64))
    hdr[40:40 + len(tail)] = tail
    if crc is None:
        crc = record_crc(hdr, data[:dim * 4] if dim in (16, 32, 64, 128) else data)
    hdr[20:24] = crc.to_bytes(4, "little")
    if tail_after:
        hdr[40:40 + len(tail_after)] = tail_after
    base = img.slot_line(cfg, slot)
    img.put(base, bytes(hdr))
    stored = bytearray(data)
    if torn:
        stored[rng.randrange(len(stored))] ^= 1 << rng.randrange(8)
    for k in range(len(stored) // 64):
        img.put(base + 1 + k, bytes(stored[64 * k:64 * k + 64]))
    return bytes(stored)


def model_recover(img, cfg, rd_err=()):
    """docs/training.md section 6 recovery on ``img`` (modified in place). Returns (ok, C,
    applied, row_writes, epoch) where row_writes = [(line, data)] in issue order and epoch the
    device's copy afterwards (0 after a format, E+1 else; the superblock word is written last).
    Read errors: the superblock -> not ok; pass 1 header -> skipped (scan continues); pass 2 ->
    slot invalid."""
    if SB_LINE in rd_err:
        return False, None, 0, [], None
    sb = unpack_fields(SB_FIELDS, img.get(SB_LINE))
    if sb["magic"] != SB_MAGIC or sb["version"] != SB_VERSION:
        img.put(SB_LINE, bytes(64), FULL_BE & ~0xFF)
        img.put(SB_LINE, sb_bytes(0), 0xFF)
        return True, 0, 0, [], 0
    c, e = sb["committed"], sb["recovery_epoch"]
    ob = (c + 1) & M64
    n = cfg.log_slots

    def current(h):
        return h["magic"] == LOG_MAGIC and h["batch"] == ob and h["epoch"] == e

    q = n
    for s in range(n):
        line = img.slot_line(cfg, s)
        if line in rd_err:
            continue
        if not current(unpack_fields(LOG_HDR_FIELDS, img.get(line))):
            q = s
            break
    applied, writes = 0, []
    for s in reversed(range(min(q + cfg.log_window, n))):
        line = img.slot_line(cfg, s)
        raw = img.get(line)
        h = unpack_fields(LOG_HDR_FIELDS, raw)
        dim, addr = h["dim"], h["addr"]
        if line in rd_err or not current(h):
            continue
        if dim not in (16, 32, 64, 128) or addr % 64:
            continue
        if not (cfg.table_base <= addr and addr + dim * 4 <= cfg.table_base + cfg.table_size):
            continue
        lines = [line + 1 + k for k in range(dim // 16)]
        if any(x in rd_err for x in lines):
            continue
        data = b"".join(img.get(x) for x in lines)
        if zlib.crc32(data + bytes(raw[:20]) + bytes(4) + bytes(raw[24:64])) != h["crc"]:
            continue
        for k in range(dim // 16):
            img.put(addr // 64 + k, data[64 * k:64 * k + 64])
            writes.append((addr // 64 + k, data[64 * k:64 * k + 64]))
        applied += 1
    e1 = (e + 1) & M64
    img.put(SB_LINE, bytes(32) + e1.to_bytes(8, "little") + bytes(24), EPOCH_BE)
    return True, c, applied, writes, e1


def sw_model_recover(img, cfg):
    """The same recovery by ``sw_model.training.TrainingDevice.recover()`` on a copy of ``img``:
    (applied, C, epoch, {line: bytes} of every line it holds)."""
    mem = MemoryImage()
    for line, raw in img.lines.items():
        mem.write(line * 64, raw)
    dev = TrainingDevice(cfg, mem)
    touched = set(img.lines)
    dev.on_write = lambda addr, data, what: touched.update(
        range(addr // 64, (addr + len(data) + 63) // 64))
    applied = dev.recover()
    lines = {line: mem.read(line * 64, 64) for line in touched}
    return applied, dev.committed, dev.recovery_epoch, lines


# ---- bench -------------------------------------------------------------------------------------

class Bench:
    """PersistEngine + memory responder. ``rd_err`` / ``wr_err``: line addresses answering an
    error (an errored write does not change memory)."""

    def __init__(self, rng, img, cfg=CFG, *, lat=(1, 12), p_stall=0.2, **kw):
        self.rng, self.img, self.cfg = rng, img, cfg
        self.dut = PersistEngine(cfg, **kw)
        self.lat, self.stall = lat, Stall(rng, p_stall)
        self.rd_err, self.wr_err = set(), set()
        self.reads, self.writes = [], []      # (cycle, line) / (cycle, line, be, data bytes)
        self.acks = []                        # cycle of each write response transfer
        self.retires = []                     # cycles with retire high
        self.ready_rise = []                  # cycles where ready went 0 -> 1
        self.t = 0

    def background(self):
        d = self.dut
        return [self.responder, check_stream(d.mem.rd_req, "rd_req"),
                check_stream(d.mem.wr_req, "wr_req"),
                check_stream(d.commit_done, "commit_done")]

    def _rel(self, q):
        rel = self.t + self.rng.randint(*self.lat)
        return max(rel, q[-1][0] + 1) if q else rel

    async def responder(self, ctx):
        mem = self.dut.mem
        rq, wq = [], []                       # (release cycle, payload)
        ready_prev = 0
        cfg = self.cfg
        while True:
            ctx.set(mem.rd_req.ready, 0 if self.stall() else 1)
            ctx.set(mem.wr_req.ready, 0 if self.stall() else 1)
            rh = rq[0] if rq and rq[0][0] <= self.t else None
            wh = wq[0] if wq and wq[0][0] <= self.t else None
            if rh:
                ctx.set(mem.rd_resp.payload, rh[1])
            if wh:
                ctx.set(mem.wr_resp.payload, wh[1])
            ctx.set(mem.rd_resp.valid, rh is not None)
            ctx.set(mem.wr_resp.valid, wh is not None)
            *_, qv, qr, qp, wv, wr, wp, sr, br, ret, rdy = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, mem.wr_req.valid,
                mem.wr_req.ready, mem.wr_req.payload, mem.rd_resp.ready, mem.wr_resp.ready,
                self.dut.retire, self.dut.ready)
            if ret:
                self.retires.append(self.t)
            if rdy and not ready_prev:
                self.ready_rise.append(self.t)
            ready_prev = rdy
            if rh:
                assert sr, "rd_resp back-pressured"
                rq.pop(0)
            if wh:
                assert br, "wr_resp back-pressured"
                wq.pop(0)
                self.acks.append(self.t)
            if qv and qr:
                line = qp.addr
                assert qp.id == PERSIST_ID and qp.op == RD_CUR, f"read id/op {qp}"
                assert cfg.region_of(line * 64) in ("log", "superblock"), \
                    f"read of line {line:#x} outside log/superblock"
                self.reads.append((self.t, line))
                data = int.from_bytes(self.img.get(line), "little")
                rq.append((self._rel(rq), {"id": PERSIST_ID, "err": line in self.rd_err,
                                           "data": data}))
            if wv and wr:
                line, be = wp.addr, wp.be
                raw = int(wp.data).to_bytes(64, "little")
                assert wp.id == PERSIST_ID, f"write id {wp.id}"
                assert cfg.region_of(line * 64) in ("table", "superblock"), \
                    f"write of line {line:#x} outside table/superblock"
                self.writes.append((self.t, line, be, raw))
                err = line in self.wr_err
                if not err:
                    self.img.put(line, raw, be)
                wq.append((self._rel(wq), {"id": PERSIST_ID, "err": err}))
            self.t += 1

    async def recover(self, ctx, timeout=20000):
        """Pulse recover, wait until not busy; returns the status outputs and the cycles."""
        d = self.dut
        ctx.set(d.recover, 1)
        await ctx.tick()
        ctx.set(d.recover, 0)
        t0 = self.t
        assert ctx.get(d.busy) and ctx.get(d.recovering) and not ctx.get(d.ready)
        c0 = ctx.get(d.cyc_recover)
        for _ in range(timeout):
            if not ctx.get(d.busy):
                break
            assert ctx.get(d.recovering)
            await ctx.tick()
        else:
            raise AssertionError("recovery did not finish")
        st = {k: ctx.get(getattr(d, k)) for k in ("committed", "ready", "recovering",
                                                   "recovered_records", "media_err", "epoch")}
        st["cycles"] = ctx.get(d.cyc_recover) - c0
        st["start"] = t0
        for _ in range(2):             # let the responder see the final retire pulse
            await ctx.tick()
        return st

    async def commit(self, ctx, batch):
        d = self.dut
        ctx.set(d.commit.payload, {"batch": batch})
        ctx.set(d.commit.valid, 1)
        while True:
            *_, r = await ctx.tick().sample(d.commit.ready)
            if r:
                break
        ctx.set(d.commit.valid, 0)
        ctx.set(d.commit_done.ready, 1)
        while True:
            *_, v, p = await ctx.tick().sample(d.commit_done.valid, d.commit_done.payload)
            if v:
                break
        ctx.set(d.commit_done.ready, 0)
        await ctx.tick()
        return p.err_code


def row_writes(bench, since=0):
    return [(line, raw) for t, line, be, raw in bench.writes
            if t >= since and line != SB_LINE and be == FULL_BE]


def run(bench, tb, max_cycles=40000, name="persist"):
    simulate(bench.dut, [tb], bench.background(), max_cycles=max_cycles, name=name)


def check_epoch_write(bench, since, e, until=None):
    """The recovery started at cycle ``since`` (and ended before ``until``) wrote ``recovery_epoch = e+1`` (mod 2^64) as its
    last write: one superblock write of bytes 32..39, issued after every earlier write was
    acknowledged; retire and ready come after its acknowledgement."""
    until = 1 << 62 if until is None else until
    idx = [i for i, (t, line, be, raw) in enumerate(bench.writes) if since <= t < until]
    sb = [i for i in idx if bench.writes[i][1] == SB_LINE]
    assert len(sb) == 1 and sb[0] == idx[-1], "the epoch write is not the single last write"
    t, line, be, raw = bench.writes[sb[0]]
    assert be == EPOCH_BE and raw[32:40] == ((e + 1) & M64).to_bytes(8, "little"), \
        f"epoch write be={be:#x} data={raw[32:40].hex()}"
    if sb[0] > 0:
        assert t > bench.acks[sb[0] - 1], "epoch write issued before the row writes were acked"
    ack = bench.acks[sb[0]]
    rise = [r for r in bench.ready_rise if since <= r < until]
    ret = [r for r in bench.retires if since <= r < until]
    assert rise and rise[0] > ack, f"ready at {rise}, epoch ack at {ack}"
    assert ret == [ack + 1], f"retire at {ret}, epoch ack at {ack}"


def check_sw_model(before, after, cfg, applied, c, epoch, seed=None):
    """``sw_model``'s recovery of the image ``before`` gives the same count, C, epoch and lines
    as the RTL (``after``)."""
    sa, sc, se, lines = sw_model_recover(before, cfg)
    assert (sa, sc, se) == (applied, c, epoch), f"seed={seed}: sw_model {(sa, sc, se)}"
    for line in set(lines) | set(after.lines):
        assert lines.get(line, bytes(64)) == after.get(line), f"seed={seed}: line {line:#x}"


# ---- random images -----------------------------------------------------------------------------

def random_image(rng, cfg, c, e, *, q=None, n_rows=6):
    """Superblock with ``committed = c``, ``recovery_epoch = e``; a run of ``q`` current headers
    (batch c+1, epoch e) mixing good records, torn CRCs, junk header tails, bad dims, misaligned
    and out-of-region addresses, a terminator at slot q, then holes, good and stale records
    (wrong batch, magic or epoch) up to the window and good records past it. Rows come from a
    small set so that several records hit one row."""
    img = Image()
    img.put(SB_LINE, sb_bytes(c, epoch=e, tail=bytes(rng.randrange(256) for _ in range(16))))
    ob = (c + 1) & M64
    n = cfg.log_slots
    if q is None:
        q = rng.randint(0, min(20, n))
    rows = [TABLE_BASE + 64 * rng.randrange(TABLE_SIZE // 64 - 8) for _ in range(n_rows)]
    rows.append(TABLE_BASE + TABLE_SIZE - 128)                 # last row of the region (dim 32)

    def good(s):
        dim = rng.choice((16, 32, 64, 128))
        addr = rng.choice(rows)
        if addr + dim * 4 > TABLE_BASE + TABLE_SIZE:
            dim = 32
        tail = bytes(rng.randrange(256) for _ in range(24)) if rng.random() < 0.2 else b""
        put_record(img, cfg, s, batch=ob, epoch=e, addr=addr, dim=dim, rng=rng, tail=tail)

    def live_bad(s):
        kind = rng.choice(("torn", "tail", "dim", "align", "below", "above"))
        addr, dim = rng.choice(rows), 64
        kw = dict(batch=ob, epoch=e, rng=rng)
        if kind == "torn":
            put_record(img, cfg, s, addr=addr, dim=dim, torn=True, **kw)
        elif kind == "tail":
            put_record(img, cfg, s, addr=addr, dim=dim, **kw,
                       tail_after=bytes([1 << rng.randrange(8)]))
        elif kind == "dim":
            put_record(img, cfg, s, addr=addr, dim=rng.choice((0, 8, 48, 96, 256)),
                       data=bytes(rng.randrange(256) for _ in range(512)), **kw)
        elif kind == "align":
            put_record(img, cfg, s, addr=addr + rng.choice((4, 32)), dim=dim, **kw)
        elif kind == "below":
            put_record(img, cfg, s, addr=TABLE_BASE - 64, dim=16, **kw)
        else:
            put_record(img, cfg, s, addr=TABLE_BASE + TABLE_SIZE - 64, dim=32, **kw)

    def stale(s):
        kind = rng.choice(("batch", "magic", "epoch"))
        batch = rng.choice((c, (c + 2) & M64, ob ^ (1 << 40))) if kind == "batch" else ob
        epoch = rng.choice((e - 1, e + 1, e ^ (1 << 63))) if kind == "epoch" else e
        put_record(img, cfg, s, batch=batch, epoch=epoch, addr=rng.choice(rows), dim=16, rng=rng,
                   magic=LOG_MAGIC ^ 1 if kind == "magic" else LOG_MAGIC)

    for s in range(q):
        (good if rng.random() < 0.7 else live_bad)(s)
    if q < n:
        if rng.random() < 0.6:
            stale(q)                    # else a hole (zeros)
    for s in range(q + 1, min(q + cfg.log_window + 3, n)):
        x = rng.random()
        if x < 0.5:
            good(s)
        elif x < 0.7:
            stale(s)
        elif x < 0.8:
            live_bad(s)
    # table contents: random, so that every applied write is visible
    for r in rows:
        for k in range(8):
            img.put(r // 64 + k, bytes(rng.randrange(256) for _ in range(64)))
    return img


# ---- tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,which", [(1, "magic"), (2, "version")])
def test_fresh_superblock_is_formatted(seed, which):
    """A superblock with a wrong magic (or version) and junk (nonzero recovery_epoch bytes):
    formatted by a write of bytes 8..63 (zeros), then, after its response, a write of bytes 0..7
    (magic, version); C = 0, epoch = 0, ready, one retire, no log read, no epoch write. A second
    recovery finds a formatted device, C = 0, applies nothing and only writes recovery_epoch = 1
    (epoch = 1)."""
    rng = make_rng(seed)
    junk = bytearray(rng.randrange(256) for _ in range(64))
    junk[0:8] = sb_bytes(0, magic=SB_MAGIC ^ (which == "magic"),
                         version=SB_VERSION + (which == "version"))[0:8]
    junk[32] |= 1
    img = Image({SB_LINE: bytes(junk)})
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        out["n_writes"] = len(b.writes)
        out["img"] = img.get(SB_LINE)
        out["b"] = await b.recover(ctx)

    run(b, tb, name=f"persist_format_{seed}")
    a = out["a"]
    assert (a["ready"], a["committed"], a["recovered_records"], a["media_err"], a["epoch"]) == \
        (1, 0, 0, 0, 0)
    assert out["n_writes"] == 2
    (t1, l1, be1, d1), (t2, l2, be2, d2) = b.writes[:2]
    assert (l1, be1, d1[8:]) == (SB_LINE, FULL_BE & ~0xFF, bytes(56))
    assert (l2, be2, d2[:8]) == (SB_LINE, 0xFF, sb_bytes(0)[:8])
    assert b.acks[0] < t2, "magic word written before the first write was acknowledged"
    assert out["img"] == sb_bytes(0)
    assert b.retires[0] > b.acks[1] and len(b.retires) == 2
    assert b.ready_rise[0] > b.acks[1]
    assert b.reads[0][1] == SB_LINE
    s2 = out["b"]
    assert (s2["ready"], s2["committed"], s2["recovered_records"], s2["epoch"]) == (1, 0, 0, 1)
    assert len(b.writes) == 3, "second recovery: only the epoch write expected"
    check_epoch_write(b, s2["start"], 0)
    assert img.get(SB_LINE) == sb_bytes(0, epoch=1)
    # second recovery: pass 1 stops at slot 0 (it may have read ahead), pass 2 reads the window
    # headers 3..0; no data line is read
    log_reads = [line for t, line in b.reads if t >= s2["start"] and line != SB_LINE]
    hdrs = {Image().slot_line(CFG, s) for s in range(CFG.log_window)}
    assert hdrs <= set(log_reads)
    assert all((line - CFG.log_base // 64) % 9 == 0 for line in log_reads)


def test_format_resets_epoch_copy():
    """A recovery with E = 5 leaves epoch = 6; the superblock is then destroyed (magic 0): the
    next recovery formats it and the device's copy becomes 0 (the word is 0 after the zero
    write; no epoch write follows)."""
    rng = make_rng(3)
    img = Image({SB_LINE: sb_bytes(2, epoch=5)})
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        img.put(SB_LINE, bytes(8), 0xFF)
        out["n_w"] = len(b.writes)
        out["b"] = await b.recover(ctx)

    run(b, tb, name="persist_format_epoch")
    assert out["a"]["epoch"] == 6 and sb_epoch(img) == 0
    s = out["b"]
    assert (s["ready"], s["committed"], s["epoch"]) == (1, 0, 0)
    assert [be for _, _, be, _ in b.writes[out["n_w"]:]] == [FULL_BE & ~0xFF, 0xFF]
    assert img.get(SB_LINE) == sb_bytes(0)


SMALL = dict(reads=2, ring=2, buf_lines=8, writes=2)


@pytest.mark.parametrize("seed,params", [(11, {}), (12, {}), (13, {}), (14, {}),
                                         (15, SMALL), (16, SMALL)])
def test_recovery_matches_model(seed, params):
    """Random logs (current run with torn/junk-tail/bad-dim/misaligned/out-of-region records,
    terminator, holes, stale batches/magics/epochs, records past the window): the row writes
    (lines and data, in issue order), the final memory, C, recovered_records and epoch equal the
    section 6 model and sw_model; the epoch write is last, after every row ack, before ready.
    Exercises newest-first application (several records per row: the lowest slot's contents
    win). The SMALL variants use minimal internal queues (2 reads, 2 ring entries, 8 buffer
    lines, 2 writes) under heavy stalls: every credit limit is hit and nothing deadlocks."""
    rng = make_rng(seed)
    c = rng.choice([0, 41, rng.randrange(1 << 64), M64])
    e = rng.choice([0, 3, rng.randrange(1 << 64), M64])
    img = random_image(rng, CFG, c, e)
    before = img.copy()
    expect = img.copy()
    ok, mc, applied, mwrites, me = model_recover(expect, CFG)
    b = Bench(rng, img, p_stall=0.4 if params else 0.2, **params)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name=f"persist_random_{seed}")
    s = out["s"]
    print(f"seed={seed} C={c:#x} E={e:#x} applied={applied} cycles={s['cycles']}")
    assert (s["ready"], s["committed"], s["recovered_records"], s["media_err"], s["epoch"]) == \
        (1, mc, applied, 0, me), f"seed={seed}"
    assert me == (e + 1) & M64
    assert row_writes(b) == mwrites, f"seed={seed}: row writes differ from the model"
    assert img.lines == expect.lines, f"seed={seed}"
    check_epoch_write(b, 0, e)
    check_sw_model(before, img, CFG, applied, c, me, seed)


def test_two_records_of_one_row_older_wins():
    """Slots 0 and 2 log the same row (different contents), slot 1 another row: after recovery
    the row holds slot 0's contents, written after slot 2's."""
    rng = make_rng(21)
    c = 7
    img = Image({SB_LINE: sb_bytes(c)})
    row, other = TABLE_BASE + 64 * 10, TABLE_BASE + 64 * 40
    d0 = put_record(img, CFG, 0, batch=c + 1, epoch=0, addr=row, dim=32, rng=rng)
    d1 = put_record(img, CFG, 1, batch=c + 1, epoch=0, addr=other, dim=16, rng=rng)
    d2 = put_record(img, CFG, 2, batch=c + 1, epoch=0, addr=row, dim=32, rng=rng)
    assert d0 != d2
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name="persist_older_wins")
    assert out["s"]["recovered_records"] == 3
    assert img.get(row // 64) + img.get(row // 64 + 1) == d0
    assert img.get(other // 64) == d1
    assert [line for line, _ in row_writes(b)] == [row // 64, row // 64 + 1, other // 64,
                                                   row // 64, row // 64 + 1]


def test_each_invalid_record_kind_is_ignored():
    """One current (magic, batch C+1, epoch E) record of each invalid kind between good ones:
    torn CRC, header CRC field wrong, junk in header bytes 40.. after the CRC, dims 0/48/256,
    addresses +4 and +32 off alignment, one line below the table region, crossing its end; then
    a stale batch ends the run (q); inside the window a wrong-magic record and two otherwise
    good records of epochs E-1 and E+1. Only the good records are applied."""
    rng = make_rng(25)
    c, e = 1000, 5
    ob = c + 1
    img = Image({SB_LINE: sb_bytes(c, epoch=e)})
    row = [TABLE_BASE + 1024 * k for k in range(22)]
    junk = bytes(rng.randrange(256) for _ in range(512))
    bad = [
        dict(addr=row[1], dim=64, torn=True),
        dict(addr=row[2], dim=32, crc=0x1234_5678),
        dict(addr=row[2], dim=32, tail_after=b"\x00\x80"),
        dict(addr=row[3], dim=0, data=junk),
        dict(addr=row[4], dim=48, data=junk),
        dict(addr=row[5], dim=256, data=junk),
        dict(addr=row[6] + 4, dim=16),
        dict(addr=row[7] + 32, dim=64),
        dict(addr=TABLE_BASE - 64, dim=16),
        dict(addr=TABLE_BASE + TABLE_SIZE - 64, dim=32),
    ]
    slot, good = 0, {}
    for kw in bad:
        good[slot] = put_record(img, CFG, slot, batch=ob, epoch=e, addr=row[8 + slot // 2],
                                dim=16, rng=rng)
        put_record(img, CFG, slot + 1, batch=ob, epoch=e, rng=rng, **kw)
        slot += 2
    put_record(img, CFG, slot, batch=c, epoch=e, addr=row[0], dim=16, rng=rng)            # q
    put_record(img, CFG, slot + 1, batch=ob, epoch=e, addr=row[0], dim=16, rng=rng,
               magic=LOG_MAGIC + 1)
    put_record(img, CFG, slot + 2, batch=ob, epoch=e - 1, addr=row[0], dim=16, rng=rng)
    put_record(img, CFG, slot + 3, batch=ob, epoch=e + 1, addr=row[1], dim=16, rng=rng)
    for r in row + [TABLE_BASE - 64, TABLE_BASE + TABLE_SIZE - 64]:
        for k in range(8):
            img.put(r // 64 + k, bytes([0xEE]) * 64)
    before = img.copy()
    expect = img.copy()
    ok, _, applied, mwrites, me = model_recover(expect, CFG)
    assert applied == len(bad)
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name="persist_invalid_kinds")
    assert out["s"]["recovered_records"] == len(bad) and out["s"]["epoch"] == e + 1
    assert row_writes(b) == mwrites and img.lines == expect.lines
    check_sw_model(before, img, CFG, applied, c, e + 1)


def test_other_epoch_records_are_ignored():
    """E = 2^40 + 7, W = 4. Slots 0..2 current; slot 3 a perfect record of batch C+1 but epoch
    E-1 (left over from an earlier attempt): it ends the scan (q = 3) and is not applied; slot
    4 current (applied, inside q + W), slot 5 epoch E+1 (ignored), slot 6 current (applied),
    slot 7 current but past the window (its data is not read; pass 1 may read its header
    ahead). Checked against the model and sw_model."""
    rng = make_rng(27)
    c, e = 12, (1 << 40) + 7
    img = Image({SB_LINE: sb_bytes(c, epoch=e)})
    epochs = {0: e, 1: e, 2: e, 3: e - 1, 4: e, 5: e + 1, 6: e, 7: e}
    addr = {s: TABLE_BASE + 1024 * s for s in epochs}
    for s, ep in epochs.items():
        put_record(img, CFG, s, batch=c + 1, epoch=ep, addr=addr[s], dim=64, rng=rng)
        for k in range(4):
            img.put(addr[s] // 64 + k, bytes([0x5A ^ s]) * 64)
    before = img.copy()
    expect = img.copy()
    ok, _, applied, mwrites, me = model_recover(expect, CFG)
    assert applied == 5
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name="persist_other_epoch")
    s = out["s"]
    assert (s["recovered_records"], s["epoch"], s["committed"]) == (5, e + 1, c)
    assert row_writes(b) == mwrites and img.lines == expect.lines
    for sl in (3, 5, 7):
        assert img.get(addr[sl] // 64) == bytes([0x5A ^ sl]) * 64, f"slot {sl} applied"
    data7 = set(range(img.slot_line(CFG, 7) + 1, img.slot_line(CFG, 8)))
    assert not data7 & {line for _, line in b.reads}, "data of slot 7 (past q + W) read"
    check_epoch_write(b, 0, e)
    check_sw_model(before, img, CFG, 5, c, e + 1)


def test_window_holes_and_bound():
    """W = 4: good records in slots 0..2 (q = 3: slot 3 is a hole), 4, 5, 6 (inside q + W) and 7
    (past the window, ignored): 6 records applied; slot 7 is never read."""
    rng = make_rng(31)
    img = Image({SB_LINE: sb_bytes(100)})
    rows = {}
    for s in (0, 1, 2, 4, 5, 6, 7):
        addr = TABLE_BASE + 1024 * s
        rows[s] = (addr, put_record(img, CFG, s, batch=101, epoch=0, addr=addr, dim=64, rng=rng))
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name="persist_window")
    assert out["s"]["recovered_records"] == 6
    for s, (addr, d) in rows.items():
        got = b"".join(img.get(addr // 64 + k) for k in range(4))
        assert (got == d) == (s != 7), f"slot {s}"
    assert all(line < img.slot_line(CFG, 7) for _, line in b.reads if line != SB_LINE)


def test_full_log_scans_to_log_slots():
    """Every slot of a 16-slot log holds a current record (q = log_slots): pass 2 starts at slot
    15 (min(q + W, log_slots) - 1) and applies all 16 records."""
    cfg = CFG.with_(log_size=16 * LOG_SLOT_BYTES, log_window=8)
    rng = make_rng(41)
    img = Image({SB_LINE: sb_bytes(5, epoch=9)})
    for s in range(16):
        put_record(img, cfg, s, batch=6, epoch=9, addr=TABLE_BASE + 512 * s, dim=128, rng=rng)
    expect = img.copy()
    ok, _, applied, mwrites, me = model_recover(expect, cfg)
    assert applied == 16
    b = Bench(rng, img, cfg)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name="persist_full")
    assert out["s"]["recovered_records"] == 16 and out["s"]["epoch"] == 10
    assert row_writes(b) == mwrites and img.lines == expect.lines


@pytest.mark.parametrize("seed", [51, 52])
def test_recovery_is_idempotent_until_epoch_write(seed):
    """A crash during recovery after its row writes but before the epoch write landed (the
    superblock line is put back): the rerun writes the same lines with the same data, reports
    the same count and epoch, and leaves memory unchanged."""
    rng = make_rng(seed)
    e = rng.randrange(1 << 64)
    img = random_image(rng, CFG, rng.randrange(1 << 20), e, q=12)
    sb0 = img.get(SB_LINE)
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        out["img"] = img.copy()
        img.put(SB_LINE, sb0)
        out["b"] = await b.recover(ctx)

    run(b, tb, name=f"persist_idem_{seed}")
    a, s = out["a"], out["b"]
    assert a["recovered_records"] == s["recovered_records"] > 0, f"seed={seed}"
    assert a["epoch"] == s["epoch"] == (e + 1) & M64
    first = row_writes(b)[:len(row_writes(b)) // 2]
    assert row_writes(b, since=s["start"]) == first
    assert img.lines == out["img"].lines
    check_epoch_write(b, s["start"], e)


@pytest.mark.parametrize("e", [0, 77, M64 - 1, M64])
def test_second_recovery_increments_epoch_again(e):
    """Superblock epoch E with current records: recovery 1 applies them and writes E+1 (mod
    2^64: E = 2^64-1 wraps to 0); recovery 2 finds them stale (epoch E != E+1), applies none and
    writes E+2; the device copy follows (as sw_model does on the same images)."""
    rng = make_rng(90 + (e & 0xFF))
    c = 4
    img = Image({SB_LINE: sb_bytes(c, epoch=e)})
    for s in range(3):
        put_record(img, CFG, s, batch=c + 1, epoch=e, addr=TABLE_BASE + 512 * s, dim=32, rng=rng)
    before = img.copy()
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        out["mid"] = img.copy()
        out["b"] = await b.recover(ctx)

    run(b, tb, name=f"persist_epoch_{e:x}")
    a, s = out["a"], out["b"]
    e1, e2 = (e + 1) & M64, (e + 2) & M64
    assert (a["recovered_records"], a["epoch"], s["recovered_records"], s["epoch"]) == \
        (3, e1, 0, e2)
    assert sb_epoch(out["mid"]) == e1 and sb_epoch(img) == e2
    check_epoch_write(b, a["start"], e, until=s["start"])
    check_epoch_write(b, s["start"], e1)
    check_sw_model(before, out["mid"], CFG, 3, c, e1)
    check_sw_model(out["mid"], img, CFG, 0, c, e2)


def test_epoch_write_media_error():
    """The epoch write answers an error: the rows are rolled back, but recovery ends with
    ready = 0, media_err = 1, no retire, epoch output still E, superblock unchanged. A retried
    recovery (no error) applies the same records again and writes E+1."""
    rng = make_rng(95)
    c, e = 20, 300
    img = Image({SB_LINE: sb_bytes(c, epoch=e)})
    for s in range(5):
        put_record(img, CFG, s, batch=c + 1, epoch=e, addr=TABLE_BASE + 256 * s, dim=64, rng=rng)
    expect = img.copy()
    ok, _, applied, mwrites, me = model_recover(expect, CFG)
    b = Bench(rng, img)
    b.wr_err.add(SB_LINE)
    out = {}

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        out["ret"] = list(b.retires)
        b.wr_err.clear()
        out["b"] = await b.recover(ctx)

    run(b, tb, name="persist_epoch_err")
    a, s = out["a"], out["b"]
    assert (a["ready"], a["media_err"], a["epoch"], a["recovered_records"]) == (0, 1, e, 5)
    assert out["ret"] == [] and not [r for r in b.ready_rise if r < s["start"]]
    assert (s["ready"], s["media_err"], s["epoch"], s["recovered_records"]) == (1, 0, e + 1, 5)
    assert row_writes(b, since=s["start"]) == mwrites == row_writes(b)[:len(mwrites)]
    assert img.lines == expect.lines
    check_epoch_write(b, s["start"], e)


def test_commit_writes_committed_word_and_retires_after_ack():
    """After recovery (C = 9, epoch E -> E+1): COMMIT 10 is one write of the superblock line with
    be = 0xFF << 8 and bytes 8..15 = 10; retire pulses once, one cycle after its response;
    committed = 10; commit_done 0; epoch unchanged. COMMIT 11 whose write answers an error:
    commit_done MEDIA, committed stays 10, no retire, media_err set; the next recovery clears
    media_err, reads C = 10 and writes E+2."""
    rng = make_rng(61)
    e = 0xAAAA_AAAA_AAAA_AAAA
    tail = b"\xAA" * 24
    img = Image({SB_LINE: sb_bytes(9, tail=tail, epoch=e)})
    b = Bench(rng, img)
    out = {}

    async def tb(ctx):
        d = b.dut
        out["rec"] = await b.recover(ctx)
        n_w, n_r = len(b.writes), len(b.retires)
        c0 = ctx.get(d.cyc_commit)
        out["err1"] = await b.commit(ctx, 10)
        out["after1"] = (ctx.get(d.committed), ctx.get(d.media_err), ctx.get(d.busy),
                         ctx.get(d.epoch))
        out["w1"], out["r1"], out["a1"] = b.writes[n_w:], b.retires[n_r:], b.acks[-1]
        out["img1"] = img.get(SB_LINE)
        assert ctx.get(d.cyc_commit) > c0
        b.wr_err.add(SB_LINE)
        n_w, n_r = len(b.writes), len(b.retires)
        out["err2"] = await b.commit(ctx, 11)
        out["after2"] = (ctx.get(d.committed), ctx.get(d.media_err))
        out["w2"], out["r2"] = b.writes[n_w:], b.retires[n_r:]
        b.wr_err.clear()
        out["rec2"] = await b.recover(ctx)

    run(b, tb, name="persist_commit")
    assert out["rec"]["committed"] == 9 and out["rec"]["epoch"] == e + 1
    assert out["err1"] == 0 and out["after1"] == (10, 0, 0, e + 1)
    [(t, line, be, raw)] = out["w1"]
    assert (line, be, raw[8:16]) == (SB_LINE, 0xFF << 8, (10).to_bytes(8, "little"))
    assert out["r1"] == [out["a1"] + 1], f"retire cycles {out['r1']}, ack at {out['a1']}"
    assert out["img1"] == sb_bytes(10, tail=tail, epoch=e + 1)
    assert out["err2"] == DeviceError.MEDIA and out["after2"] == (10, 1)
    assert len(out["w2"]) == 1 and out["r2"] == []
    r2 = out["rec2"]
    assert (r2["committed"], r2["media_err"], r2["epoch"]) == (10, 0, e + 2)
    assert img.get(SB_LINE) == sb_bytes(10, tail=tail, epoch=e + 2)


@pytest.mark.parametrize("seed", [71, 72])
def test_media_errors_during_recovery(seed):
    """Read errors: on a header inside the current run (pass 1 skips it, pass 2 drops the slot)
    and on a data line of another current record (dropped): media_err, ``rec_media`` pulses
    once, the other records applied as in the model, then recovery stops before the epoch write
    (ready = 0, epoch output E, superblock unchanged). A superblock read error ends recovery with
    ready = 0 and no write. Without errors a retry applies every record and writes E+1."""
    rng = make_rng(seed)
    c = 3
    img = Image({SB_LINE: sb_bytes(c)})
    for s in range(10):
        put_record(img, CFG, s, batch=c + 1, epoch=0, addr=TABLE_BASE + 512 * s, dim=128,
                   rng=rng)
    put_record(img, CFG, 12, batch=c + 1, epoch=0, addr=TABLE_BASE + 512 * 12, dim=16, rng=rng)
    bad_hdr = img.slot_line(CFG, rng.randrange(1, 5))
    bad_data = img.slot_line(CFG, rng.randrange(5, 10)) + rng.randint(1, 8)
    errs = {bad_hdr, bad_data}
    expect = img.copy()
    ok, _, applied, mwrites, me = model_recover(expect, CFG, errs)
    assert applied == 9              # 10 + slot 12 (q = 10, window 4) - 2 dropped
    b = Bench(rng, img)
    b.rd_err |= errs
    out = {}

    pulses = []

    async def count_pulses(ctx):
        async for _, _, v in ctx.tick().sample(b.dut.rec_media):
            pulses.append(int(v))

    async def tb(ctx):
        out["a"] = await b.recover(ctx)
        out["pulses_a"] = sum(pulses)
        b.rd_err = {SB_LINE}
        out["n_w"] = len(b.writes)
        out["b"] = await b.recover(ctx)
        b.rd_err = set()
        out["n_w2"] = len(b.writes)
        out["c"] = await b.recover(ctx)

    simulate(b.dut, [tb], b.background() + [count_pulses], max_cycles=40000,
             name=f"persist_media_{seed}")
    a, s, r = out["a"], out["b"], out["c"]
    assert (a["ready"], a["media_err"], a["recovered_records"], a["epoch"]) == (0, 1, applied, 0)
    assert out["pulses_a"] == 1, out["pulses_a"]
    assert row_writes(b)[:len(mwrites)] == mwrites and out["n_w"] == len(mwrites)
    assert all(b.writes[i][1] != SB_LINE for i in range(out["n_w"])), "epoch written"
    assert (s["ready"], s["media_err"]) == (0, 1) and out["n_w2"] == out["n_w"]
    assert (r["ready"], r["media_err"], r["recovered_records"], r["epoch"]) == (1, 0, 11, 1)
    check_epoch_write(b, b.writes[out["n_w2"]][0], 0)


@pytest.mark.parametrize("q", [0, 16, 48])
def test_recovery_cycles(q):
    """Prints the cycles a recovery takes for q current dim-64 records (fixed latency 16, no
    stalls, W = 16) next to the lines it must read; checks a loose bound showing the scan and
    the record reads are pipelined (about one line per cycle, not one latency per slot)."""
    lat = 16
    cfg = CFG.with_(log_window=16)
    rng = make_rng(80 + q)
    img = Image({SB_LINE: sb_bytes(1)})
    for s in range(q):
        put_record(img, cfg, s, batch=2, epoch=0, addr=TABLE_BASE + 256 * s, dim=64, rng=rng)
    b = Bench(rng, img, cfg, lat=(lat, lat), p_stall=0.0)
    out = {}

    async def tb(ctx):
        out["s"] = await b.recover(ctx)

    run(b, tb, name=f"persist_cycles_{q}")
    s = out["s"]
    lines = 1 + (q + 1) + (q + cfg.log_window) + 4 * q
    print(f"recovery: q={q} records (dim 64), window {cfg.log_window}, latency {lat}: "
          f"{s['cycles']} cycles for {lines} line reads + {4 * q} line writes + epoch write")
    assert s["recovered_records"] == q
    check_epoch_write(b, 0, 0)
    assert s["cycles"] <= lines + 9 * lat + 40, s["cycles"]
