"""PersistEngine(snapshots=True): the MLP slot choice at the end of a recovery
(docs/training.md section 9).

Slot images are built here (hw.encodings.pack_fields, zlib.crc32) and the expected choice comes
from :func:`model_choice`, a direct transcription of section 9's recovery rule, independent of the
RTL. The log region is empty (no undo record applies), so recovery goes straight to the epoch
write and then the slot choice. Memory: dict of lines, seeded random stalls and latency.
"""
import zlib

import pytest

from hw.config import DEFAULT
from hw.encodings import (LOG_SLOT_BYTES, SB_FIELDS, SB_MAGIC, SB_VERSION, SNAP_HDR_FIELDS,
                          SNAP_MAGIC, pack_fields, unpack_fields)
from hw.persist import PERSIST_ID, PersistEngine

from pysim_util import LineImage, Stall, make_rng, simulate

CFG = DEFAULT.with_(log_size=8 * LOG_SLOT_BYTES, log_window=2, slots_size=37 * 64)
SLOT_BYTES = (CFG.slots_size // 2) // 64 * 64
CAP = SLOT_BYTES - 64
SB_LINE = CFG.superblock_base // 64


def slot_line(i):
    return (CFG.slots_base + i * SLOT_BYTES) // 64


Image = LineImage


def put_slot(img, rng, i, *, epoch, length, magic=SNAP_MAGIC, corrupt=False, junk_tail=True,
             hdr_length=None):
    """Slot ``i`` with a payload of ``length`` random bytes; bytes of the last line past
    ``length`` hold junk (``junk_tail``), which the CRC must ignore. ``corrupt``: one payload
    byte changed after the CRC. ``hdr_length``: length field written instead of ``length``."""
    payload = bytes(rng.randrange(256) for _ in range(length))
    n_lines = -(-length // 64)
    body = bytearray(payload + bytes(64 * n_lines - length))
    if junk_tail and length % 64:
        for k in range(length, 64 * n_lines):
            body[k] = rng.randrange(1, 256)
    vals = {"magic": magic, "crc": 0, "epoch": epoch,
            "length": length if hdr_length is None else hdr_length}
    vals["crc"] = zlib.crc32(payload + bytes(64 * n_lines - length) +
                             pack_fields(SNAP_HDR_FIELDS, vals, 64))
    if corrupt and length:
        body[rng.randrange(length)] ^= 1 << rng.randrange(8)
    img.put(slot_line(i), pack_fields(SNAP_HDR_FIELDS, vals, 64))
    for k in range(n_lines):
        img.put(slot_line(i) + 1 + k, bytes(body[64 * k:64 * k + 64]))


def model_choice(img, c, rd_err=()):
    """Section 9: (MLP_SLOT, MLP_EPOCH) recovery reports for committed batch ``c``. A slot whose
    header or payload line read fails is invalid."""
    best = None
    for i in (0, 1):
        raw = img.get(slot_line(i))
        h = unpack_fields(SNAP_HDR_FIELDS, raw)
        if slot_line(i) in rd_err or h["magic"] != SNAP_MAGIC or h["length"] > CAP \
                or h["epoch"] > c:
            continue
        n = -(-h["length"] // 64)
        lines = [slot_line(i) + 1 + k for k in range(n)]
        if any(x in rd_err for x in lines):
            continue
        data = b"".join(img.get(x) for x in lines)[:h["length"]]
        hz = bytearray(raw)
        hz[4:8] = bytes(4)
        if zlib.crc32(data + bytes(64 * n - h["length"]) + bytes(hz)) != h["crc"]:
            continue
        if best is None or h["epoch"] > best[1]:
            best = (i, h["epoch"])
    return (0, 0) if best is None else (best[0] + 1, best[1])


def sb(committed, epoch=3, magic=SB_MAGIC):
    return pack_fields(SB_FIELDS, {"magic": magic, "version": SB_VERSION,
                                   "committed": committed, "recovery_epoch": epoch}, 64)


def run_recovery(rng, img, rd_err=(), snap_busy_cycles=0):
    """Recover on ``img``; returns (mlp_load samples [(slot, epoch)], ready, reads, writes,
    cycle of the recover pulse, cycle of the first read)."""
    dut = PersistEngine(CFG, reads=8, snapshots=True)
    stall = Stall(rng, 0.2)
    res = {"loads": [], "reads": [], "writes": [], "t": 0}

    async def responder(ctx):
        mem = dut.mem
        rq, wq = [], []
        while True:
            t = res["t"]
            ctx.set(mem.rd_req.ready, 0 if stall() else 1)
            ctx.set(mem.wr_req.ready, 0 if stall() else 1)
            rh = rq[0] if rq and rq[0][0] <= t else None
            wh = wq[0] if wq and wq[0][0] <= t else None
            if rh:
                ctx.set(mem.rd_resp.payload, rh[1])
            if wh:
                ctx.set(mem.wr_resp.payload, wh[1])
            ctx.set(mem.rd_resp.valid, rh is not None)
            ctx.set(mem.wr_resp.valid, wh is not None)
            *_, qv, qr, qp, wv, wr, wp, ld, ls, le, rdy = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, mem.wr_req.valid,
                mem.wr_req.ready, mem.wr_req.payload, dut.mlp_load, dut.mlp_slot,
                dut.mlp_epoch, dut.ready)
            if ld:
                res["loads"].append((int(ls), int(le), t))
            if rh:
                rq.pop(0)
            if wh:
                wq.pop(0)
            if qv and qr:
                line = qp.addr
                assert qp.id == PERSIST_ID
                res["reads"].append((t, line))
                rel = max(t + rng.randint(1, 9), rq[-1][0] + 1 if rq else 0)
                rq.append((rel, {"id": PERSIST_ID, "err": line in rd_err,
                                 "data": int.from_bytes(img.get(line), "little")}))
            if wv and wr:
                raw = int(wp.data).to_bytes(64, "little")
                assert CFG.region_of(wp.addr * 64) in ("table", "superblock"), hex(wp.addr)
                img.put(wp.addr, raw, wp.be)
                res["writes"].append((t, wp.addr, wp.be))
                rel = max(t + rng.randint(1, 9), wq[-1][0] + 1 if wq else 0)
                wq.append((rel, {"id": PERSIST_ID, "err": 0}))
            res["t"] = t + 1

    async def tb(ctx):
        ctx.set(dut.snap_busy, 1 if snap_busy_cycles else 0)
        ctx.set(dut.recover, 1)
        await ctx.tick()
        ctx.set(dut.recover, 0)
        res["t_rec"] = res["t"]
        for _ in range(snap_busy_cycles):
            await ctx.tick()
        ctx.set(dut.snap_busy, 0)
        for _ in range(20000):
            if not ctx.get(dut.busy):
                break
            await ctx.tick()
        await ctx.tick()
        res["ready"] = ctx.get(dut.ready)
        res["out"] = (ctx.get(dut.mlp_slot), ctx.get(dut.mlp_epoch))

    simulate(dut, [tb], [responder], max_cycles=30000, name="snap_recovery")
    return res


CASES = {
    # name: (C, slot A spec, slot B spec); spec = dict for put_slot or None (zeros)
    "both_valid_b_newer": (10, dict(epoch=6, length=200), dict(epoch=9, length=130)),
    "both_valid_a_newer": (10, dict(epoch=9, length=64), dict(epoch=6, length=1)),
    "tie_picks_a": (10, dict(epoch=7, length=65), dict(epoch=7, length=70)),
    "b_epoch_above_c": (8, dict(epoch=5, length=100), dict(epoch=9, length=100)),
    "b_crc_bad": (10, dict(epoch=5, length=300), dict(epoch=9, length=300, corrupt=True)),
    "a_bad_magic": (10, dict(epoch=9, length=10, magic=0x1234), dict(epoch=3, length=10)),
    "b_length_over_cap": (10, dict(epoch=2, length=40),
                          dict(epoch=9, length=40, hdr_length=CAP + 1)),
    "full_capacity": (10, dict(epoch=4, length=CAP), dict(epoch=3, length=CAP - 1)),
    "length_zero": (10, None, dict(epoch=2, length=0)),
    "none_valid": (10, dict(epoch=11, length=5), None),
    "empty": (0, None, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_slot_choice(name):
    c, a, b = CASES[name]
    rng = make_rng(sum(map(ord, name)))
    img = Image()
    img.put(SB_LINE, sb(c))
    for i, spec in ((0, a), (1, b)):
        if spec is not None:
            put_slot(img, rng, i, **spec)
    exp = model_choice(img, c)
    slots_before = {k: v for k, v in img.lines.items() if CFG.region_of(k * 64) == "slots"}
    res = run_recovery(rng, img)
    assert res["ready"] == 1
    assert [(s, e) for s, e, _ in res["loads"]] == [exp], f"{name}: {res['loads']} != {exp}"
    assert res["out"] == exp
    # slots are only read, after the epoch write
    assert {k: v for k, v in img.lines.items()
            if CFG.region_of(k * 64) == "slots"} == slots_before
    ep_t = [t for t, line, be in res["writes"] if line == SB_LINE][-1]
    slot_reads = [(t, x) for t, x in res["reads"] if CFG.region_of(x * 64) == "slots"]
    assert all(t > ep_t for t, _ in slot_reads)
    # header reads, and payload lines only of plausible slots
    hdr_reads = [x for _, x in slot_reads if x in (slot_line(0), slot_line(1))]
    assert sorted(hdr_reads) == [slot_line(0), slot_line(1)]


def test_random_slots_and_read_errors(seed):
    """Random slot pairs (epochs around C, lengths 0..CAP, corruption, junk) with read errors
    on a random header or payload line: the choice matches the model."""
    rng = make_rng(seed)
    for _ in range(3):
        c = rng.randrange(2, 12)
        img = Image()
        img.put(SB_LINE, sb(c))
        for i in (0, 1):
            put_slot(img, rng, i, epoch=rng.randrange(0, 14),
                     length=rng.choice([0, 1, 63, 64, 65, rng.randrange(CAP + 1), CAP]),
                     corrupt=rng.random() < 0.25)
        rd_err = set()
        if rng.random() < 0.5:
            i = rng.randrange(2)
            n = -(-unpack_fields(SNAP_HDR_FIELDS, img.get(slot_line(i)))["length"] // 64)
            rd_err.add(slot_line(i) + rng.randrange(n + 1))
        exp = model_choice(img, c, rd_err)
        res = run_recovery(rng, img, rd_err)
        assert [(s, e) for s, e, _ in res["loads"]] == [exp], \
            f"seed={seed} C={c} err={rd_err}: {res['loads']} != {exp}"


def test_format_reports_no_slot_and_hold():
    """A fresh superblock is formatted: mlp_load (0, 0), no slot read. ``snap_busy`` holds the
    start of recovery (no read before it falls)."""
    rng = make_rng(7)
    img = Image()
    img.put(SB_LINE, sb(5, magic=0))
    put_slot(img, rng, 0, epoch=3, length=100)
    res = run_recovery(rng, img, snap_busy_cycles=40)
    assert [(s, e) for s, e, _ in res["loads"]] == [(0, 0)]
    assert all(CFG.region_of(x * 64) != "slots" for _, x in res["reads"])
    assert min(t for t, _ in res["reads"]) >= res["t_rec"] + 40
