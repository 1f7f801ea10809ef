"""SnapshotEngine (hw/snapshot/engine.py): the background copy of an MLP snapshot
(docs/training.md section 9).

The memory is a dict of 64-byte lines prefilled with a per-line pattern (guard bytes) behind a
responder with seeded random request stalls and in-order random response latency; reads sample
the image at acceptance, writes land at acceptance. Expected images are built here from the
byte layouts (hw.encodings.pack_fields) with the CRC computed by zlib over the zero-padded
payload and the header with its crc bytes zero; only the payload bytes, the header line and the
8 superblock bytes of ``mlp_slot`` may change.
"""
import zlib

import pytest

from hw.config import DEFAULT
from hw.encodings import SB_FIELDS, SNAP_HDR_FIELDS, SNAP_MAGIC, pack_fields
from hw.reqport import RD_CUR
from hw.snapshot import SNAP_ID, SnapshotEngine, snap_capacity, snap_slot_bytes

from pysim_util import LineImage, Stall, check_stream, make_rng, simulate

# slots region of 37 lines: two slots of 18 lines (capacity 1088 bytes) and one spare line
CFG = DEFAULT.with_(slots_size=37 * 64, max_writes=8)
SLOT_BYTES = (CFG.slots_size // 2) // 64 * 64
CAP = SLOT_BYTES - 64
SB_LINE = CFG.superblock_base // 64
FLIP_OFF = next(off for n, off, w in SB_FIELDS if n == "mlp_slot")
S = CFG.staging_base


def pattern(line):
    """Guard contents of a line nobody wrote: distinct per line and per byte."""
    return bytes(((line * 131) + 7 * i + (line >> 8)) & 0xFF for i in range(64))


class Mem(LineImage):
    """LineImage whose never-written lines read as the guard pattern."""

    def get(self, line):
        return self.lines.get(line, pattern(line))

    def write_bytes(self, addr, data):
        for i, b in enumerate(data):
            line, o = divmod(addr + i, 64)
            raw = bytearray(self.get(line))
            raw[o] = b
            self.lines[line] = bytes(raw)

    def snapshot(self):
        return dict(self.lines)


def header_bytes(epoch, payload):
    """Section 9 header line with its CRC (zlib, independent of the RTL's network)."""
    vals = {"magic": SNAP_MAGIC, "crc": 0, "epoch": epoch, "length": len(payload)}
    pad = bytes(-len(payload) % 64)
    vals["crc"] = zlib.crc32(bytes(payload) + pad + pack_fields(SNAP_HDR_FIELDS, vals, 64))
    return pack_fields(SNAP_HDR_FIELDS, vals, 64)


def slot_addr(i):
    return CFG.slots_base + i * SLOT_BYTES


def expected_after(mem_before, slot, epoch, payload):
    """Image after a completed snapshot of ``payload`` into ``slot`` (a Mem)."""
    exp = Mem()
    exp.lines = dict(mem_before)
    exp.write_bytes(slot_addr(slot) + 64, payload)
    exp.put(slot_addr(slot) // 64, header_bytes(epoch, payload))
    exp.write_bytes(CFG.superblock_base + FLIP_OFF, (slot + 1).to_bytes(8, "little"))
    return exp


class Bench:
    def __init__(self, rng, *, lat=(1, 10), p_stall=0.2, depth=4):
        self.rng = rng
        self.dut = SnapshotEngine(CFG, depth=depth)
        self.mem = Mem()
        self.lat, self.stall = lat, Stall(rng, p_stall)
        self.rd_err, self.wr_err = set(), set()
        self.log = []           # ("rd", t, line) / ("wr", t, line, be) / ("ack", t, line)
        self.max_rd_inflight = 0
        self.errs = []          # (t, value) of err pulses
        self.t = 0

    def background(self):
        d = self.dut
        return [self.responder, check_stream(d.mem.rd_req, "rd_req"),
                check_stream(d.mem.wr_req, "wr_req")]

    def _rel(self, q):
        rel = self.t + self.rng.randint(*self.lat)
        return max(rel, q[-1][0] + 1) if q else rel

    async def responder(self, ctx):
        mem = self.dut.mem
        rq, wq = [], []
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
            *_, qv, qr, qp, wv, wr, wp, sr, br, err, errv = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, mem.wr_req.valid,
                mem.wr_req.ready, mem.wr_req.payload, mem.rd_resp.ready, mem.wr_resp.ready,
                self.dut.err, self.dut.err_value)
            if err:
                self.errs.append((self.t, int(errv)))
            if rh:
                assert sr, "rd_resp back-pressured"
                rq.pop(0)
            if wh:
                assert br, "wr_resp back-pressured"
                wq.pop(0)
                self.log.append(("ack", self.t, wh[2]))
            if qv and qr:
                line = qp.addr
                assert qp.id == SNAP_ID and qp.op == RD_CUR, f"read id/op {qp}"
                assert CFG.region_of(line * 64) == "staging", f"read of line {line:#x}"
                self.log.append(("rd", self.t, line))
                rq.append((self._rel(rq), {"id": SNAP_ID, "err": line in self.rd_err,
                                           "data": int.from_bytes(self.mem.get(line), "little")}))
            if wv and wr:
                line, be = wp.addr, wp.be
                assert wp.id == SNAP_ID, f"write id {wp.id}"
                raw = int(wp.data).to_bytes(64, "little")
                self.log.append(("wr", self.t, line, be))
                err = line in self.wr_err
                if not err:
                    self.mem.put(line, raw, be)
                wq.append((self._rel(wq), {"id": SNAP_ID, "err": err}, line))
            self.max_rd_inflight = max(self.max_rd_inflight, len(rq))
            self.t += 1

    async def snap(self, ctx, epoch, src, length, timeout=20000):
        """Start one snapshot, wait until ``busy`` falls; returns the outputs."""
        d = self.dut
        ctx.set(d.start.payload, {"epoch": epoch, "src": src, "length": length})
        ctx.set(d.start.valid, 1)
        while True:
            *_, r = await ctx.tick().sample(d.start.ready)
            if r:
                break
        ctx.set(d.start.valid, 0)
        assert ctx.get(d.busy) and ctx.get(d.accepted) == epoch
        for _ in range(timeout):
            if not ctx.get(d.busy):
                break
            await ctx.tick()
        else:
            raise AssertionError("snapshot did not finish")
        await ctx.tick()
        await ctx.tick()
        return {k: int(ctx.get(getattr(d, k))) for k in ("accepted", "mlp_epoch", "mlp_slot")}


def check_order(bench, since, slot, n_lines):
    """Writes after ``since``: payload lines (any order) all acknowledged before the header is
    issued, the header acknowledged before the superblock word is issued."""
    ev = [e for e in bench.log if e[1] >= since]
    wrs = [e for e in ev if e[0] == "wr"]
    hdr_line = slot_addr(slot) // 64
    pay = [e for e in wrs if e[2] not in (hdr_line, SB_LINE)]
    assert sorted(e[2] for e in pay) == [hdr_line + 1 + j for j in range(n_lines)]
    hdr = [e for e in wrs if e[2] == hdr_line]
    sb = [e for e in wrs if e[2] == SB_LINE]
    assert len(hdr) == 1 and len(sb) == 1, wrs
    assert hdr[0][3] == (1 << 64) - 1 and sb[0][3] == 0xFF << FLIP_OFF
    acks = [e for e in ev if e[0] == "ack"]
    pay_acks = [e for e in acks if e[2] not in (hdr_line, SB_LINE)]
    assert len(pay_acks) == n_lines
    if pay_acks:
        assert hdr[0][1] > max(e[1] for e in pay_acks), "header before payload acks"
    hdr_ack = [e for e in acks if e[2] == hdr_line]
    assert sb[0][1] > hdr_ack[0][1], "superblock word before the header ack"


LENGTHS = (0, 1, 63, 64, 65, 127, 200, 1000, CAP)
OFFSETS = (0, 1, 7, 63)


@pytest.mark.parametrize("seed", [1, 2])
def test_copy_sweep(seed):
    """A seeded selection of (length, source offset) pairs, each copied into alternating slots;
    the whole memory image (guard pattern included) must equal the expected one, writes in the
    contract's order, several reads in flight."""
    rng = make_rng(seed)
    cases = [(n, o) for n in LENGTHS for o in OFFSETS]
    rng.shuffle(cases)
    cases = cases[:12] + [(CAP, 63), (0, 5), (65, 63)]
    b = Bench(rng, depth=4)
    got = []

    async def tb(ctx):
        epoch = 10
        for i, (n, o) in enumerate(cases):
            src = S + 64 * rng.randrange(1, 100) + o
            payload = bytes(rng.randrange(256) for _ in range(n))
            b.mem.write_bytes(src, payload)
            before = b.mem.snapshot()
            slot = i % 2
            t0 = b.t
            st = await b.snap(ctx, epoch, src, n)
            exp = expected_after(before, slot, epoch, payload)
            keys = set(exp.lines) | set(b.mem.lines)
            bad = [hex(k) for k in sorted(keys) if exp.get(k) != b.mem.get(k)]
            assert not bad, f"seed={seed} case={(n, o)} lines differ: {bad[:8]}"
            assert st == {"accepted": epoch, "mlp_epoch": epoch, "mlp_slot": slot + 1}, \
                f"seed={seed} case={(n, o)} {st}"
            check_order(b, t0, slot, -(-n // 64))
            n_rd = len([e for e in b.log if e[0] == "rd" and e[1] >= t0])
            assert n_rd == (0 if n == 0 else -(-(o + n) // 64)), f"seed={seed} reads {n_rd}"
            got.append((n, o))
            epoch += rng.randrange(1, 5)
        assert not b.errs

    simulate(b.dut, [tb], b.background(), max_cycles=60000, name="snap_sweep")
    assert len(got) == len(cases)
    assert b.max_rd_inflight >= 2, "reads are not pipelined"


def test_fast_memory_throughput():
    """No stalls, fixed latency: a 1000-byte snapshot (16 payload lines) takes well under
    the cycles of one read round trip per line."""
    rng = make_rng(5)
    lat = 12
    b = Bench(rng, lat=(lat, lat), p_stall=0.0, depth=8)
    cyc = []

    async def tb(ctx):
        src = S + 64 * 3 + 9
        b.mem.write_bytes(src, bytes(range(256)) * 4)
        t0 = b.t
        await b.snap(ctx, 1, src, 1000)
        cyc.append(b.t - t0)

    simulate(b.dut, [tb], b.background(), max_cycles=5000, name="snap_fast")
    # 17 reads / 8 in flight -> ~3 round trips, then header and flip round trips
    assert cyc[0] < 8 * lat, f"took {cyc[0]} cycles"


@pytest.mark.parametrize("where", ["read", "write", "header", "flip"])
def test_media_error_stops(where):
    """A media error on a source read, a payload write, the header or the superblock word:
    err pulses once with the epoch, nothing more is written (no header / word after it),
    ``accepted`` returns to the last completed epoch, ``mlp_*`` unchanged; the next snapshot
    goes to the same slot and succeeds."""
    rng = make_rng(11)
    b = Bench(rng, depth=4)
    src = S + 64 * 7 + 3
    n = 600

    async def tb(ctx):
        p1 = bytes(rng.randrange(256) for _ in range(100))
        b.mem.write_bytes(S, p1)
        st = await b.snap(ctx, 4, S, len(p1))            # slot A, epoch 4
        assert st == {"accepted": 4, "mlp_epoch": 4, "mlp_slot": 1}
        payload = bytes(rng.randrange(256) for _ in range(n))
        b.mem.write_bytes(src, payload)
        hdr_b = slot_addr(1) // 64
        if where == "read":
            b.rd_err.add(src // 64 + 4)
        elif where == "write":
            b.wr_err.add(hdr_b + 1 + 3)
        elif where == "header":
            b.wr_err.add(hdr_b)
        else:
            b.wr_err.add(SB_LINE)
        before = b.mem.snapshot()
        t0 = b.t
        st = await b.snap(ctx, 9, src, n)
        assert st == {"accepted": 4, "mlp_epoch": 4, "mlp_slot": 1}, st
        assert [v for _, v in b.errs] == [9], b.errs
        wrs = [e for e in b.log if e[0] == "wr" and e[1] >= t0]
        if where in ("read", "write"):
            assert all(e[2] not in (hdr_b, SB_LINE) for e in wrs), "header/word after error"
        if where == "header":
            assert all(e[2] != SB_LINE for e in wrs)
        if where == "read":
            # no payload line at or after the bad source line was written
            assert all(e[2] < hdr_b + 1 + 4 for e in wrs if e[2] != hdr_b), wrs
        # only slot B and (for "flip") the superblock line changed
        for k in set(before) | set(b.mem.lines):
            if b.mem.get(k) != before.get(k, pattern(k)):
                assert hdr_b <= k < hdr_b + SLOT_BYTES // 64, hex(k)
        # retry without errors: same slot (B), completes
        b.rd_err.clear()
        b.wr_err.clear()
        before = b.mem.snapshot()
        st = await b.snap(ctx, 9, src, n)
        assert st == {"accepted": 9, "mlp_epoch": 9, "mlp_slot": 2}, st
        exp = expected_after(before, 1, 9, payload)
        for k in set(exp.lines) | set(b.mem.lines):
            assert exp.get(k) == b.mem.get(k), hex(k)

    simulate(b.dut, [tb], b.background(), max_cycles=20000, name=f"snap_err_{where}")


def test_load_sets_state():
    """``load`` (recovery) sets mlp_slot / mlp_epoch / accepted and the active slot: after
    slot B was recovered the next snapshot goes to slot A; after 'none', to slot A too."""
    rng = make_rng(3)
    b = Bench(rng)

    async def tb(ctx):
        d = b.dut
        for ls, le, nxt in ((2, 77, 0), (0, 0, 0), (1, 5, 1)):
            ctx.set(d.load_slot, ls)
            ctx.set(d.load_epoch, le)
            ctx.set(d.load, 1)
            await ctx.tick()
            ctx.set(d.load, 0)
            await ctx.tick()
            assert (ctx.get(d.mlp_slot), ctx.get(d.mlp_epoch), ctx.get(d.accepted)) == \
                (ls, le, le)
            st = await b.snap(ctx, le + 1, S + 5, 70)
            assert st == {"accepted": le + 1, "mlp_epoch": le + 1, "mlp_slot": nxt + 1}, st

    simulate(b.dut, [tb], b.background(), max_cycles=10000, name="snap_load")


def test_geometry():
    assert snap_slot_bytes(CFG) == SLOT_BYTES == 18 * 64 and snap_capacity(CFG) == CAP == 1088
    assert snap_slot_bytes(DEFAULT) == DEFAULT.slots_size // 2


# ---- command processor level: SNAPSHOT checks and waits, COMMIT lag check -----------------------

class CpSnap:
    """CommandProcessor + PersistEngine(snapshots=True) + SnapshotEngine on one request port
    (ids 3, 10, 11 through a RequestPortMux), wired as hw/top.py; no gather/update/logger."""

    def __init__(self, cfg):
        from amaranth.hdl import Elaboratable, Module
        from amaranth.lib import wiring
        from hw.cmdproc.processor import CommandProcessor, RING_REGS
        from hw.persist import PersistEngine
        from hw.port_mux import RequestPortMux

        outer = self
        self.cp = CommandProcessor(cfg, {r: 4 * i for i, r in
                                         enumerate((*RING_REGS, "control"))})
        self.persist = PersistEngine(cfg, reads=8, snapshots=True)
        self.snap = SnapshotEngine(cfg, depth=4)
        self.mux = RequestPortMux(cfg.addr_bits, [(3,), (10,), (11,)])

        class Top(Elaboratable):
            def elaborate(self, platform):
                m = Module()
                cp, persist, snap, mux = outer.cp, outer.persist, outer.snap, outer.mux
                m.submodules += [cp, persist, snap, mux]
                for i, e in enumerate((cp, persist, snap)):
                    wiring.connect(m, e.mem, getattr(mux, f"req_{i}"))
                wiring.connect(m, cp.commit, persist.commit)
                wiring.connect(m, persist.commit_done, cp.commit_done)
                wiring.connect(m, cp.snap_start, snap.start)
                m.d.comb += [
                    cp.committed.eq(persist.committed), cp.ready.eq(persist.ready),
                    cp.persist_busy.eq(persist.busy), persist.recover.eq(cp.recover),
                    cp.log_idle.eq(1), cp.log_settled.eq(1),
                    cp.snap_busy.eq(snap.busy), cp.snap_accepted.eq(snap.accepted),
                    cp.snap_epoch.eq(snap.mlp_epoch), cp.snap_err.eq(snap.err),
                    cp.snap_err_value.eq(snap.err_value),
                    persist.snap_busy.eq(snap.busy), snap.load.eq(persist.mlp_load),
                    snap.load_slot.eq(persist.mlp_slot), snap.load_epoch.eq(persist.mlp_epoch),
                ]
                return m
        self.top = Top()


def desc_bytes(**kw):
    from hw.encodings import DESC_FIELDS
    return pack_fields(DESC_FIELDS, kw, 64)


def test_cmdproc_snapshot_and_commit_lag():
    """MLP_LAG = 1. COMMIT refused (MLP_LAG, value b - P) with nothing in flight; COMMIT waits
    for an in-flight snapshot that satisfies it (completion after the snapshot's superblock
    word is acknowledged) and fails with MLP_LAG when that snapshot fails (media error, reported
    as MEDIA with value = its epoch); SNAPSHOT checks in order (BAD_EPOCH, ADDR_RANGE width,
    SNAP_LENGTH, ADDR_RANGE staging); a SNAPSHOT completes at once (before its copy) and a second
    one waits for the first copy to end."""
    from hw.encodings import CPL_FIELDS, DescKind, DeviceError, unpack_fields
    rng = make_rng(31)
    cfg = CFG
    h = CpSnap(cfg)
    cp, snap = h.cp, h.snap
    E, K = DeviceError, DescKind
    cmd_base, size = S, 32
    cpl_base = S + size * 64
    buf = S + 0x10000 + 5
    s_end = cfg.staging_base + cfg.staging_size
    D = [  # (descriptor fields, expected (status, err_value, batch, lines), hold, read error)
        (dict(kind=K.COMMIT, batch=1), (0, 0, 1, 0), 0, 0),
        (dict(kind=K.COMMIT, batch=2), (E.MLP_LAG, 2, 2, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=2, data_addr=buf, length=100), (0, 0, 2, 2), 1, 0),
        (dict(kind=K.COMMIT, batch=2), (0, 0, 2, 0), 0, 0),          # waits for #2
        (dict(kind=K.SNAPSHOT, batch=2, data_addr=buf, length=1), (E.BAD_EPOCH, 2, 2, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=4, data_addr=buf, length=1), (E.BAD_EPOCH, 4, 4, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=3, data_addr=1 << cfg.addr_bits, length=CAP + 1),
         (E.ADDR_RANGE, 1 << cfg.addr_bits, 3, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=3, data_addr=buf, length=CAP + 1),
         (E.SNAP_LENGTH, CAP + 1, 3, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=3, data_addr=s_end - 10, length=11),
         (E.ADDR_RANGE, s_end - 10, 3, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=3, data_addr=s_end, length=0),
         (E.ADDR_RANGE, s_end, 3, 0), 0, 0),
        (dict(kind=5, batch=3), (E.UNKNOWN_KIND, 5, 3, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=3, data_addr=s_end - 64, length=64), (0, 0, 3, 1), 0, 0),
        (dict(kind=K.COMMIT, batch=3), (0, 0, 3, 0), 0, 0),
        (dict(kind=K.COMMIT, batch=4), (0, 0, 4, 0), 0, 0),
        (dict(kind=K.SNAPSHOT, batch=5, data_addr=buf, length=300), (0, 0, 5, 5), 1, 1),
        (dict(kind=K.COMMIT, batch=5), (E.MLP_LAG, 2, 5, 0), 0, 0),  # waits, #14 fails
        (dict(kind=K.SNAPSHOT, batch=4, data_addr=buf, length=130), (0, 0, 4, 3), 1, 0),
        (dict(kind=K.SNAPSHOT, batch=5, data_addr=buf + 1, length=0), (0, 0, 5, 0), 0, 0),
        (dict(kind=K.COMMIT, batch=5), (0, 0, 5, 0), 0, 0),
    ]
    mem = Mem()
    payload = bytes(rng.randrange(256) for _ in range(400))
    mem.write_bytes(buf, payload)
    mem.write_bytes(s_end - 64, payload[:64])
    for i, (f, *_rest) in enumerate(D):
        mem.put(cmd_base // 64 + i, desc_bytes(tag=100 + i, **f))
    st = {"hold": False, "rd_err": None, "t": 0, "cpl": {}, "flip_acks": [], "errs": []}

    async def responder(ctx):
        port = h.mux.mem
        qs = {}                         # id -> [(release, payload)] per channel
        pend_err = False
        while True:
            t = st["t"]
            ctx.set(port.rd_req.ready, 1)
            ctx.set(port.wr_req.ready, 1)
            rh = wh = None
            for (ch, i), q in sorted(qs.items()):
                if q and q[0][0] <= t and not (ch == "rd" and i == SNAP_ID and st["hold"]):
                    if ch == "rd" and rh is None:
                        rh = (ch, i)
                    if ch == "wr" and wh is None:
                        wh = (ch, i)
            ctx.set(port.rd_resp.valid, rh is not None)
            ctx.set(port.wr_resp.valid, wh is not None)
            if rh:
                ctx.set(port.rd_resp.payload, qs[rh][0][1])
            if wh:
                ctx.set(port.wr_resp.payload, qs[wh][0][1])
            *_, qv, qp, wv, wp, ev = await ctx.tick().sample(
                port.rd_req.valid, port.rd_req.payload, port.wr_req.valid, port.wr_req.payload,
                cp.irq_err)
            if pend_err:
                st["errs"].append((int(ctx.get(cp.err_code)), int(ctx.get(cp.err_value)), t))
            pend_err = bool(ev)
            if rh:
                qs[rh].pop(0)
            if wh:
                item = qs[wh].pop(0)
                if item[2] == SB_LINE and wh[1] == SNAP_ID:
                    st["flip_acks"].append(t)
                if wh[1] == 3:
                    st["cpl"][item[2] - cpl_base // 64] = t
            if qv:
                line = qp.addr
                err = qp.id == SNAP_ID and st["rd_err"] == line
                qs.setdefault(("rd", int(qp.id)), []).append(
                    (t + rng.randint(1, 6), {"id": qp.id, "err": err,
                                             "data": int.from_bytes(mem.get(line), "little")}))
            if wv:
                mem.put(wp.addr, int(wp.data).to_bytes(64, "little"), wp.be)
                qs.setdefault(("wr", int(wp.id)), []).append(
                    (t + rng.randint(1, 6), {"id": wp.id, "err": 0}, int(wp.addr)))
            st["t"] = t + 1

    async def pulse(ctx, sig):
        ctx.set(sig, 1)
        await ctx.tick()
        ctx.set(sig, 0)

    async def tb(ctx):
        ctx.set(cp.mlp_lag, 1)
        await pulse(ctx, cp.recover_req)
        while not ctx.get(cp.ready):
            await ctx.tick()
        assert (ctx.get(snap.mlp_slot), ctx.get(snap.mlp_epoch)) == (0, 0)
        for r, v in (("cmd_base_lo", cmd_base & 0xFFFF_FFFF), ("cmd_base_hi", cmd_base >> 32),
                     ("cmd_size", size), ("cpl_base_lo", cpl_base & 0xFFFF_FFFF),
                     ("cpl_base_hi", cpl_base >> 32)):
            ctx.set(getattr(cp, r), v)
            await pulse(ctx, getattr(cp, r + "_swmod"))
            await ctx.tick()
        ctx.set(cp.cmd_tail, len(D))
        await pulse(ctx, cp.cmd_tail_swmod)
        for i, (f, exp, hold, rderr) in enumerate(D):
            if hold:
                st["hold"] = True
                st["rd_err"] = (buf // 64 + 1) if rderr else None
            while ctx.get(cp.cmd_head) <= i:
                await ctx.tick()
            if hold:
                # completed at once, copy still in flight; the next descriptor may wait
                assert ctx.get(snap.busy), f"#{i}: snapshot not in flight at its completion"
                for _ in range(150):
                    await ctx.tick()
                assert ctx.get(cp.cmd_head) == i + 1, f"#{i + 1} did not wait"
                st["hold"] = False
        while ctx.get(cp.busy) or ctx.get(snap.busy):
            await ctx.tick()
        for _ in range(10):
            await ctx.tick()
        assert (ctx.get(snap.mlp_slot), ctx.get(snap.mlp_epoch)) == (2, 5)
        assert ctx.get(h.persist.committed) == 5

    simulate(h.top, [tb], [responder], max_cycles=30000, name="cp_snap")
    for i, (f, exp, hold, rderr) in enumerate(D):
        c = unpack_fields(CPL_FIELDS, mem.get(cpl_base // 64 + i))
        got = (c["status"], c["err_value"], c["batch"], c["lines"])
        assert got == tuple(exp) and c["tag"] == 100 + i and c["kind"] == f["kind"], \
            f"#{i}: {c}"
        assert c["rows"] == c["sat"] == c["log_records"] == 0
    # COMMIT #3 completed after snapshot #2's word was acknowledged; #17 after #16's copy
    fa = st["flip_acks"]
    assert len(fa) == 4, fa                    # #2, #11, #16, #17 (#14 failed)
    assert st["cpl"][3] > fa[0] and st["cpl"][2] < fa[0]
    assert st["cpl"][17] > fa[2] and st["cpl"][16] < fa[2]
    codes = [(c, v) for c, v, _ in st["errs"]]
    exp_errs = [(int(e[0]), e[1]) for _, e, _, _ in D if e[0]]
    exp_errs.insert(exp_errs.index((E.MLP_LAG, 2), 1), (E.MEDIA, 5))   # before #15's MLP_LAG
    assert codes == exp_errs, codes
    # the final slot B holds snapshot #17 (epoch 5, length 0)
    assert mem.get(slot_addr(1) // 64) == header_bytes(5, b"")
